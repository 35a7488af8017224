//! The chat's pseudonymisation for one turn (see [`crate::privacy`]): its table read beside
//! the history, and every model of the turn reached through it (the table is written back
//! by [`crate::privacy::save`] when the turn or its postprocessing met a new value).

use std::sync::Arc;

use super::Turn;
use crate::pipeline::models::Models;
use crate::privacy::{ChatPrivacy, Pseudonyms};

impl Turn<'_> {
    /// The chat's pseudonymisation (`None` when `privacy.pseudonymize` is empty). A table
    /// the cache cannot give starts empty: values are hidden all the same, only their
    /// numbers may differ from earlier turns.
    pub(super) async fn load_privacy(&self) -> Option<Arc<ChatPrivacy>> {
        let detector = self.deps.privacy.clone()?;
        let table = match self.deps.ai_cache.pseudonyms(&self.owner, self.chat).await {
            Ok(Some(bytes)) => Pseudonyms::from_bytes(&bytes),
            Ok(None) => Pseudonyms::default(),
            Err(e) => {
                tracing::warn!(error = %e, "pseudonym table unavailable; starting a new one");
                Pseudonyms::default()
            }
        };
        let privacy = ChatPrivacy::new(detector, table);
        // Names the user marked private with these messages join the chat's table.
        for inbound in self.ticket.inbound.iter() {
            privacy.mark(&inbound.options.private_names);
        }
        Some(privacy)
    }

    /// The catalog as this turn reaches it: through the chat's pseudonymisation.
    pub(super) fn turn_models(&self, privacy: Option<&Arc<ChatPrivacy>>) -> Models {
        match privacy {
            Some(p) => self.deps.models.private(p.clone()),
            None => self.deps.models.clone(),
        }
    }
}
