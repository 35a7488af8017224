//! The `preprocessing_step` frames of a turn: the title, the mate, the model.

use chatd_protocol::PreprocessingStepKind;
use serde_json::json;

use crate::pipeline::StepEvent;
use crate::pipeline::preprocess::{Preprocessed, step_data};

/// The `preprocessing_step` frames of a turn, in order: the title (unless `title_late`: it
/// is still being written, see [`title_step`]), the mate, the model.
pub(super) fn steps(
    pre: &Preprocessed,
    first_message: bool,
    has_title: bool,
    title_late: bool,
) -> Vec<StepEvent> {
    let mate = StepEvent {
        step: PreprocessingStepKind::MateSelected,
        skip_reason: None,
        data: step_data(&[("category", json!(pre.category)), ("mate", json!(pre.mate))]),
    };
    let model = StepEvent {
        step: PreprocessingStepKind::ModelSelected,
        skip_reason: None,
        data: step_data(&[
            ("model_id", json!(pre.choice.model.spec.id)),
            ("model_name", json!(pre.choice.model.spec.name)),
            ("selection_reason", json!(pre.choice.reason)),
        ]),
    };
    match title_late {
        true => vec![mate, model],
        false => vec![title_step(pre, first_message, has_title), mate, model],
    }
}

/// The `title_generated` step: the title, icons and category, or why there is none.
pub(super) fn title_step(pre: &Preprocessed, first_message: bool, has_title: bool) -> StepEvent {
    match (&pre.title, first_message) {
        (Some(title), true) => StepEvent {
            step: PreprocessingStepKind::TitleGenerated,
            skip_reason: None,
            data: step_data(&[
                ("title", json!(title)),
                ("icon_names", json!(pre.icon_names)),
                ("category", json!(pre.category)),
            ]),
        },
        _ => StepEvent {
            step: PreprocessingStepKind::TitleGenerated,
            skip_reason: Some(
                if has_title {
                    "chat already has a title"
                } else if first_message {
                    "no title was generated"
                } else {
                    "not the first message"
                }
                .into(),
            ),
            data: json!({}),
        },
    }
}
