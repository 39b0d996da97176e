//! The session's own record: who it is (`SessionStarted`), how far its log goes, where its
//! import stands, and the events that only place it in its lineage or among its calls
//! (`SessionNamed`, `Branched`, `ImportCompleted`, `LimitLearned`). Every event passes here
//! first: versions are contiguous and `SessionStarted` comes first, once.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::heap::HeapSize;
use super::invariant::{Broken, Invariant};
use crate::config::Config;
use crate::event::{Event, ImportSource};
use crate::store::Version;
use crate::time::Millis;
use crate::wire::WireFormat;

/// Session-level facts from `SessionStarted`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionInfo {
    /// Session id.
    pub id: Uuid,
    /// Wire format.
    pub format: WireFormat,
    /// Knobs.
    pub config: Config,
    /// Creation time.
    pub started_at: Millis,
}

/// Where an import stands (`SessionStarted.import`, then `ImportCompleted`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportState {
    /// The transcript the import reads.
    pub source: ImportSource,
    /// `ImportCompleted` is in the log.
    pub completed: bool,
}

/// The sub-fold of the session's own record. Fields are `pub(super)` for the snapshot layout
/// and the heap accounting; only [`Lifecycle::apply`] writes them.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Lifecycle {
    pub(super) info: Option<SessionInfo>,
    pub(super) version: Version,
    pub(super) import: Option<ImportState>,
}

impl Lifecycle {
    /// The knobs in force (the defaults before `SessionStarted`).
    pub(super) fn config(&self) -> Config {
        self.info.as_ref().map(|i| i.config.clone()).unwrap_or_default()
    }

    /// Checks the envelope of every event (its version, `SessionStarted` first and once) and
    /// the events this sub-fold owns. `messages` and `calls` are the counts before `ev`.
    pub(super) fn check(&self, version: Version, ev: &Event, messages: u64, calls: u64) -> Result<(), Broken> {
        if version != self.version + 1 {
            return Err((
                Invariant::VersionContiguous,
                format!("expected version {}, got {version}", self.version + 1),
            ));
        }
        match (ev, &self.info) {
            (Event::SessionStarted(_), None) => return Ok(()),
            (Event::SessionStarted(_), Some(_)) => {
                return Err((Invariant::SessionStart, "session already started".into()))
            }
            (_, None) => return Err((Invariant::SessionStart, "the first event must be SessionStarted".into())),
            _ => {}
        }
        match ev {
            Event::Branched(e) if e.parent_version + 1 != version || e.messages != messages => Err((
                Invariant::BranchPoint,
                format!(
                    "it says {} records holding {} messages were copied; {} records holding {messages} messages precede it",
                    e.parent_version,
                    e.messages,
                    version - 1,
                ),
            )),
            // Readers find a session's name at version 2 without reading further.
            Event::SessionNamed(_) if version != 2 => {
                Err((Invariant::SessionStart, "SessionNamed must directly follow SessionStarted".into()))
            }
            Event::ImportCompleted(e) => {
                let detail = match &self.import {
                    None => "the session is not an import".to_owned(),
                    Some(i) if i.completed => "the import is already completed".to_owned(),
                    Some(i) if i.source.messages != messages || e.messages != messages => format!(
                        "it reports {} messages; the transcript announced {} and {messages} are appended",
                        e.messages, i.source.messages
                    ),
                    Some(_) if e.calls != calls => format!("it reports {} calls but {calls} were served", e.calls),
                    Some(_) => return Ok(()),
                };
                Err((Invariant::ImportCompleted, detail))
            }
            _ => Ok(()),
        }
    }

    /// Lenient replay of a record out of order: takes `version` as the last one applied.
    pub(super) fn skip_to(&mut self, version: Version) {
        self.version = version;
    }

    pub(super) fn apply(&mut self, version: Version, ev: &Event) {
        self.version = version;
        match ev {
            Event::SessionStarted(e) => {
                self.info =
                    Some(SessionInfo { id: e.session, format: e.format, config: e.config.clone(), started_at: e.at });
                self.import = e.import.clone().map(|source| ImportState { source, completed: false });
            }
            Event::ImportCompleted(_) => {
                if let Some(i) = &mut self.import {
                    i.completed = true;
                }
            }
            // A learned limit only lowers the budget.
            Event::LimitLearned(e) => {
                if let Some(info) = self.info.as_mut() {
                    info.config.budget = info.config.budget.min(e.budget.max(1));
                }
            }
            _ => {}
        }
    }

    /// Heap bytes of the import's facts.
    pub(super) fn heap_bytes(&self) -> usize {
        self.import.as_ref().map_or(0, |i| i.source.transcript_sha256.heap_bytes())
    }
}

impl super::State {
    /// Session facts (`None` before `SessionStarted`).
    pub fn info(&self) -> Option<&SessionInfo> {
        self.lifecycle.info.as_ref()
    }

    /// Stream version of the last applied event.
    pub fn version(&self) -> Version {
        self.lifecycle.version
    }

    /// Where the import that created this session stands (`None`: not an import).
    pub fn import(&self) -> Option<&ImportState> {
        self.lifecycle.import.as_ref()
    }

    /// An import created this session and has not finished it: readers treat the session as
    /// absent, and only a retried import of the same transcript may write to it.
    pub fn import_unfinished(&self) -> bool {
        self.lifecycle.import.as_ref().is_some_and(|i| !i.completed)
    }

    pub(super) fn config(&self) -> Config {
        self.lifecycle.config()
    }

    pub(super) fn estimator(&self) -> crate::tokens::Estimator {
        self.config().estimator()
    }
}

#[cfg(test)]
mod tests {
    use super::super::given::*;
    use super::super::Invariant;

    #[test]
    fn given_a_started_session_when_it_starts_again_then_session_start_is_broken() {
        given(vec![started()]).when(started()).then_violates(Invariant::SessionStart);
        given(vec![]).when(user(0, "hi")).then_violates(Invariant::SessionStart);
    }

    #[test]
    fn given_a_history_when_a_record_skips_or_repeats_a_version_then_versions_are_broken() {
        let history = vec![started(), user(0, "hi")];
        given(history.clone()).when(assistant(1, "ok")).at_version(4).then_violates(Invariant::VersionContiguous);
        given(history.clone()).when(assistant(1, "ok")).at_version(2).then_violates(Invariant::VersionContiguous);
        let st = given(history).when(assistant(1, "ok")).then_ok();
        assert_eq!(st.version(), 3);
    }

    #[test]
    fn given_a_named_session_when_a_name_comes_late_then_it_is_refused() {
        given(vec![started(), user(0, "hi")]).when(named("late")).then_violates(Invariant::SessionStart);
        given(vec![started()]).when(named("early")).then_ok();
    }

    #[test]
    fn given_a_learned_limit_when_a_higher_one_comes_then_the_budget_only_goes_down() {
        let st = given(vec![started()]).when(limit_learned(50_000)).then_ok();
        assert_eq!(st.config().budget, 50_000);
        let st = given(vec![started(), limit_learned(50_000)]).when(limit_learned(900_000)).then_ok();
        assert_eq!(st.config().budget, 50_000, "a learned limit never raises the budget");
    }
}
