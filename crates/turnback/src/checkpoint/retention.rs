//! Retention in prompt rounds and capacity caps: the two decisions about keeping content.
//!
//! Invariants:
//! - A checkpoint made in prompt round `r` is retained while the session's current round
//!   is below `r + window` (the expiry round is exclusive); the window is 1–100 rounds.
//!   Wall-clock time never decides.
//! - Capacity is counted in plaintext bytes of retained artifacts. A checkpoint fits when
//!   its own bytes are at most the per-checkpoint cap and the store's usage plus its bytes
//!   is at most the store cap: exactly at a cap is within it.
//! - Only checkpoints that are no longer retained are ever evicted to make room.

use serde::Serialize;

use crate::storage::settings::{Settings, format_size};

/// The retention verdict for one checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct RetentionVerdict {
    /// The round the checkpoint was made in.
    pub creation_prompt_round: u64,
    /// The first round in which it is no longer retained.
    pub expiry_prompt_round: u64,
    /// Whether it is still retained.
    pub retained: bool,
    /// The window that produced this verdict.
    pub window_prompt_rounds: u32,
}

/// Decides whether a checkpoint made in `created` is retained at round `current`.
pub(crate) fn evaluate(created: u64, current: u64, window: u32) -> RetentionVerdict {
    let expiry = created.saturating_add(u64::from(window));
    RetentionVerdict {
        creation_prompt_round: created,
        expiry_prompt_round: expiry,
        retained: current < expiry,
        window_prompt_rounds: window,
    }
}

/// Which cap a checkpoint would break.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Breach {
    /// The checkpoint alone is larger than the per-checkpoint cap.
    Checkpoint,
    /// The store would exceed its cap.
    Store,
}

/// The capacity verdict for a proposed checkpoint, with every figure it was made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct CapacityVerdict {
    /// Bytes the checkpoint needs.
    pub checkpoint_bytes: u64,
    /// The per-checkpoint cap.
    pub checkpoint_cap: u64,
    /// Bytes retained checkpoints already use.
    pub store_usage: u64,
    /// The store cap.
    pub store_cap: u64,
    /// The cap it breaks, if any.
    pub breach: Option<Breach>,
}

impl CapacityVerdict {
    /// Whether the checkpoint fits within both caps.
    pub fn fits(&self) -> bool {
        self.breach.is_none()
    }

    /// A sentence stating the exact usage, for the over-cap disclosure.
    pub fn disclosure(&self) -> String {
        format!(
            "this checkpoint needs {} ({} bytes; cap per checkpoint {}), retained checkpoints use {} of the store cap {} ({} of {} bytes)",
            format_size(self.checkpoint_bytes),
            self.checkpoint_bytes,
            format_size(self.checkpoint_cap),
            format_size(self.store_usage),
            format_size(self.store_cap),
            self.store_usage,
            self.store_cap,
        )
    }
}

/// Decides whether `checkpoint_bytes` more fit beside `store_usage` under `settings`.
pub(crate) fn evaluate_capacity(settings: &Settings, store_usage: u64, checkpoint_bytes: u64) -> CapacityVerdict {
    let breach = if checkpoint_bytes > settings.checkpoint_cap {
        Some(Breach::Checkpoint)
    } else if store_usage.saturating_add(checkpoint_bytes) > settings.store_cap {
        Some(Breach::Store)
    } else {
        None
    };
    CapacityVerdict {
        checkpoint_bytes,
        checkpoint_cap: settings.checkpoint_cap,
        store_usage,
        store_cap: settings.store_cap,
        breach,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_window_counts_prompt_rounds_exclusively() {
        for window in [1u32, 5, 100] {
            let w = u64::from(window);
            assert!(evaluate(10, 10, window).retained);
            assert!(evaluate(10, 10 + w - 1, window).retained, "last retained round, window {window}");
            let gone = evaluate(10, 10 + w, window);
            assert!(!gone.retained, "expiry round is exclusive, window {window}");
            assert_eq!(gone.expiry_prompt_round, 10 + w);
        }
    }

    #[test]
    fn exactly_at_a_cap_is_within_it() {
        let s = Settings { retention_prompt_rounds: 5, checkpoint_cap: 100, store_cap: 500, ..Settings::default() };
        assert!(evaluate_capacity(&s, 0, 100).fits());
        assert_eq!(evaluate_capacity(&s, 0, 101).breach, Some(Breach::Checkpoint));
        assert!(evaluate_capacity(&s, 400, 100).fits());
        assert_eq!(evaluate_capacity(&s, 401, 100).breach, Some(Breach::Store));
        assert!(evaluate_capacity(&s, 500, 0).fits());
    }

    #[test]
    fn disclosure_states_exact_bytes() {
        let s = Settings { retention_prompt_rounds: 5, checkpoint_cap: 1024, store_cap: 2048, ..Settings::default() };
        let v = evaluate_capacity(&s, 2000, 100);
        let text = v.disclosure();
        assert!(text.contains("100 bytes") && text.contains("2000 of 2048 bytes"), "{text}");
    }
}
