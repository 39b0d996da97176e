//! The policies of a call, in the order `plan` runs them: the flush [`gate`], the escalation
//! [`ladder`], and the [`guards`] that decide whether to go on (never what the view contains).

pub(crate) mod gate;
pub(crate) mod guards;
pub(crate) mod ladder;
pub(crate) mod media_cap;
