//! Each job's measured GPU energy as a note in its AdminComment in Slurm's accounting database,
//! where `sacct` users look: the sum of the job's records, the note's text, and how it joins what
//! is already written there. Pure: `heshare profiles update` reads the records and talks to
//! slurmdbd (`slurm::dbd`); this decides what to write.
//!
//! The note is one segment, `heshare-energy: energy_j=E gpu_s=S split=B records=N`, placed
//! after whatever the AdminComment holds (heshare's own decision text, a site's notes). Only that
//! segment is ever replaced, so a rerun writes nothing new and other writers' text stays as it
//! was.

use crate::node::record::{Basis, Record, RecordKind};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// The word that starts heshare's energy segment in an AdminComment.
pub const TAG: &str = "heshare-energy:";
/// The segment's fields, in the order written.
const FIELDS: [&str; 4] = ["energy_j", "gpu_s", "split", "records"];

/// One job's energy, summed over its records (one per node it ran on).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct JobEnergy {
    pub energy_j: f64,
    /// GPU-seconds held: each record's duration times its GPUs.
    pub gpu_s: f64,
    /// How the records' energy was split from their GPUs' counters; `None` before any record.
    pub split: Option<Basis>,
    /// The records summed, by id: a record read twice counts once.
    pub record_ids: BTreeSet<String>,
    /// The latest end of its records (Unix seconds).
    pub end_s: f64,
    /// When its note was last written to slurmdbd (Unix seconds), if it was.
    #[serde(default)]
    pub written_s: Option<f64>,
}

impl JobEnergy {
    /// Adds a job record; false (and nothing changed) for an idle record or one already summed.
    pub fn add(&mut self, r: &Record) -> bool {
        if r.kind != RecordKind::Job || !self.record_ids.insert(r.record_id.clone()) {
            return false;
        }
        self.energy_j += r.energy_j.max(0.0);
        #[allow(clippy::cast_precision_loss)] // a job's GPU count
        let gpus = r.gpus.len().max(1) as f64;
        self.gpu_s += r.duration_s() * gpus;
        self.split = Some(match self.split {
            None => r.basis,
            Some(b) if b == r.basis => b,
            Some(_) => Basis::Mixed,
        });
        self.end_s = self.end_s.max(r.end);
        // A record that arrives after the note was written changes the sum: write it again.
        self.written_s = None;
        true
    }

    /// The segment as written.
    pub fn note(&self) -> String {
        format!(
            "{TAG} energy_j={:.1} gpu_s={:.1} split={} records={}",
            self.energy_j,
            self.gpu_s,
            self.split.unwrap_or_default().as_str(),
            self.record_ids.len()
        )
    }
}

/// Where heshare's segment lies in `text`: the tag and the fields after it.
fn segment(text: &str) -> Option<(usize, usize)> {
    let start = text.rfind(TAG)?;
    let mut end = start + TAG.len();
    let mut rest = &text[end..];
    for field in FIELDS {
        let trimmed = rest.trim_start_matches(' ');
        let Some(value) = trimmed
            .strip_prefix(field)
            .and_then(|t| t.strip_prefix('='))
        else {
            break;
        };
        let len = value.find(char::is_whitespace).unwrap_or(value.len());
        let used = (rest.len() - trimmed.len()) + field.len() + 1 + len;
        end += used;
        rest = &text[end..];
    }
    Some((start, end))
}

/// The AdminComment with `note` in it: `None` when `existing` already says exactly that.
/// An earlier heshare segment is replaced where it stands; otherwise the note goes after the
/// existing text, one space between.
pub fn merge(existing: &str, note: &str) -> Option<String> {
    if let Some((start, end)) = segment(existing) {
        if &existing[start..end] == note {
            return None;
        }
        return Some(format!("{}{note}{}", &existing[..start], &existing[end..]));
    }
    let head = existing.trim_end();
    Some(if head.is_empty() {
        note.to_owned()
    } else {
        format!("{head} {note}")
    })
}

/// What heshare's segment in an AdminComment says, as a script reads it: `None` without one.
pub fn parse(text: &str) -> Option<Vec<(String, String)>> {
    let (start, end) = segment(text)?;
    Some(
        text[start + TAG.len()..end]
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn record(id: &str, energy: f64, basis: Basis, gpus: usize) -> Record {
        Record {
            gpus: (0..u32::try_from(gpus).expect("small")).collect(),
            start: 100.0,
            end: 160.0,
            energy_j: energy,
            basis,
            ..crate::node::record::sample(id)
        }
    }

    #[test]
    fn a_jobs_records_sum_once_each_and_their_split_is_named() {
        let mut e = JobEnergy::default();
        assert!(e.add(&record("n1:7:1", 1000.0, Basis::Measured, 1)));
        assert!(!e.add(&record("n1:7:1", 1000.0, Basis::Measured, 1)));
        assert!(e.add(&record("n2:7:1", 500.5, Basis::Measured, 2)));
        assert_eq!(
            e.note(),
            "heshare-energy: energy_j=1500.5 gpu_s=180.0 split=measured records=2"
        );
        assert!(e.add(&record("n3:7:1", 1.0, Basis::Model, 1)));
        assert_eq!(e.split, Some(Basis::Mixed));
        let mut idle = record("n1:idle:0:5", 9.0, Basis::Model, 1);
        idle.kind = RecordKind::Idle;
        assert!(!e.add(&idle));
    }

    #[test]
    fn the_note_goes_after_what_is_there_and_replaces_only_its_own_segment() {
        let note = "heshare-energy: energy_j=10.0 gpu_s=5.0 split=measured records=1";
        assert_eq!(merge("", note).as_deref(), Some(note));
        let decided = "heshare: type=a100 share=40 reason=1 share at 1410 MHz";
        let once = merge(decided, note).expect("new");
        assert_eq!(once, format!("{decided} {note}"));
        assert_eq!(merge(&once, note), None, "a rerun writes nothing");
        // Someone appended after heshare's note; a later sum replaces only heshare's segment.
        let later = format!("{once} site: checked by ops");
        let note2 = "heshare-energy: energy_j=12.0 gpu_s=6.0 split=mixed records=2";
        assert_eq!(
            merge(&later, note2).expect("changed"),
            format!("{decided} {note2} site: checked by ops")
        );
        assert_eq!(
            parse(&later).expect("segment"),
            [
                ("energy_j", "10.0"),
                ("gpu_s", "5.0"),
                ("split", "measured"),
                ("records", "1")
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
        assert_eq!(parse(decided), None);
    }

    proptest! {
        /// Whatever others wrote, merging keeps it, holds the note once, and a second merge of
        /// the same note changes nothing.
        #[test]
        fn merging_keeps_others_text_and_is_idempotent(
            others in "[ -~]{0,80}",
            e in 0.0f64..1e9,
            s in 0.0f64..1e6,
        ) {
            prop_assume!(!others.contains(TAG));
            let note = format!("{TAG} energy_j={e:.1} gpu_s={s:.1} split=measured records=1");
            let merged = merge(&others, &note).expect("a new note is written");
            prop_assert!(merged.starts_with(others.trim_end()));
            prop_assert_eq!(merged.matches(TAG).count(), 1);
            prop_assert_eq!(merge(&merged, &note), None);
            let note2 = format!("{TAG} energy_j={:.1} gpu_s={s:.1} split=mixed records=2", e + 1.0);
            let again = merge(&merged, &note2).expect("changed");
            prop_assert!(again.starts_with(others.trim_end()));
            prop_assert_eq!(again.matches(TAG).count(), 1);
            prop_assert!(again.ends_with(&note2));
        }
    }
}
