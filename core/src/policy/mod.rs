//! The policies of a call, in the order `plan` runs them: the flush [`gate`], the escalation
//! [`ladder`], the [`guards`] that decide whether to go on (never what the view contains), then
//! [`thinking`]'s drops (`keep_thinking_turns`).

pub(crate) mod gate;
pub(crate) mod guards;
pub(crate) mod ladder;
pub(crate) mod margin;
pub(crate) mod media_cap;
pub(crate) mod thinking;
