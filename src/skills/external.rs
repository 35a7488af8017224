//! The injection check of one request's outside text: every `external_text` field, the
//! words of every noisy URL ([`super::free_text`]) and the added instructions, in two
//! layers: the deterministic pre-filter ([`super::prefilter`]), then the detector model on
//! all of them as one document (split into chunks). It fails closed: when the detector
//! cannot answer, or scores the document at or above the block score without naming a
//! string found in it, every text is withheld.

use super::invocation::Invocation;
use super::prefilter;
use super::sanitize::Cleaned;

/// Why a request's outside text did not reach the model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Withheld {
    /// The detector could not be asked.
    Unchecked,
    /// The detector scored it at or above the block score and named nothing it contains.
    Blocked { score: f32 },
}

impl Withheld {
    /// What the user is told (the skill's preview).
    pub(super) fn warning(self) -> String {
        match self {
            Withheld::Unchecked => {
                "external text was withheld from the assistant: the safety check is unavailable"
                    .into()
            }
            Withheld::Blocked { score } => format!(
                "external text was withheld from the assistant: the prompt-injection check \
                 scored it {score:.0}/10 without pointing at the injected text"
            ),
        }
    }

    /// What the model is told in the tool result.
    pub(super) fn note(self) -> &'static str {
        match self {
            Withheld::Unchecked => {
                "external text from this tool was withheld: it could not be checked for prompt injection"
            }
            Withheld::Blocked { .. } => {
                "external text from this tool was withheld: the prompt-injection check blocked it"
            }
        }
    }

    /// What stands in for each withheld text.
    fn placeholder(self) -> &'static str {
        match self {
            Withheld::Unchecked => "[withheld: could not be checked for prompt injection]",
            Withheld::Blocked { .. } => "[withheld: blocked by the prompt-injection check]",
        }
    }
}

/// The checked texts, in the order given.
pub(super) struct Checked {
    pub texts: Vec<Cleaned>,
    pub withheld: Option<Withheld>,
    /// Either layer found something: the user should review the result.
    pub flagged: bool,
}

impl Invocation {
    pub(super) async fn check_external(&self, texts: Vec<&str>) -> Checked {
        let filtered: Vec<prefilter::Prefiltered> =
            texts.iter().map(|t| prefilter::prefilter(t)).collect();
        if filtered.is_empty() {
            return Checked {
                texts: Vec::new(),
                withheld: None,
                flagged: false,
            };
        }
        let suspicious = filtered.iter().any(prefilter::Prefiltered::suspicious);
        if suspicious {
            let removed: usize = filtered.iter().map(|f| f.removed).sum();
            tracing::warn!(skill = %self.skill.full_id, removed, "prompt injection removed by the pre-filter");
        }
        let document = filtered
            .iter()
            .map(|f| f.text.as_str())
            .collect::<Vec<_>>()
            .join("\n\n");
        let withhold = |why: Withheld| Checked {
            texts: filtered
                .iter()
                .map(|_| Cleaned {
                    text: why.placeholder().into(),
                    flagged: false,
                    removed: true,
                })
                .collect(),
            withheld: Some(why),
            flagged: matches!(why, Withheld::Blocked { .. }) || suspicious,
        };
        let detector = &self.deps.detector;
        let privacy = self.ctx.privacy.as_ref();
        match detector.check(&document, &self.cancel, privacy).await {
            Ok(verdict) => match detector.apply(
                &verdict,
                &filtered
                    .iter()
                    .map(|f| (f.text.as_str(), f.removed > 0))
                    .collect::<Vec<_>>(),
            ) {
                Ok(cleaned) => {
                    if detector.blocks(&verdict) {
                        tracing::warn!(skill = %self.skill.full_id, score = verdict.score, "prompt injection removed from skill output");
                    }
                    let flagged = suspicious || cleaned.iter().any(|c| c.flagged);
                    Checked {
                        texts: cleaned,
                        withheld: None,
                        flagged,
                    }
                }
                Err(score) => {
                    tracing::warn!(skill = %self.skill.full_id, score, "prompt injection scored without a span; external text withheld");
                    withhold(Withheld::Blocked { score })
                }
            },
            Err(e) => {
                tracing::warn!(skill = %self.skill.full_id, error = %e, "prompt-injection check unavailable; external text withheld");
                withhold(Withheld::Unchecked)
            }
        }
    }
}
