//! The policies of a call, in the order `plan` runs them: the flush [`gate`], the escalation
//! [`ladder`], the [`guards`] that decide whether to go on (never what the view contains), then
//! [`thinking`]'s drops (`keep_thinking_turns`).

pub mod gate;
pub mod guards;
pub mod ladder;
pub mod media_cap;
pub mod thinking;
