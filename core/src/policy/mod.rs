//! The policies of a call, in the order `plan` runs them: the flush [`gate`], the escalation
//! [`ladder`], and the [`guards`] that decide whether to go on (never what the view contains).

pub mod gate;
pub mod guards;
pub mod ladder;
pub mod margin;
pub mod media_cap;
