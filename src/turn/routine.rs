//! A message in a chat where a routine run waits for the user: the run resumes with it as
//! the answer, in this turn (its frames go through the turn's writer), instead of the
//! main model answering.

use std::sync::Arc;

use chatd_protocol::ChatId;

use super::TurnTicket;
use super::deps::TurnDeps;
use super::writer::TurnWriter;
use crate::auth::UserId;
use crate::pipeline::{TurnContext, TurnSink};

/// Whether a waiting run took the ticket's messages as its answer (and ran on).
pub(super) async fn answer(
    app: &TurnDeps,
    user: &UserId,
    chat: &ChatId,
    ticket: &TurnTicket,
    writer: &Arc<TurnWriter>,
    privacy: Option<Arc<crate::privacy::ChatPrivacy>>,
) -> bool {
    let text = ticket
        .inbound
        .iter()
        .map(|i| i.message.content.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let ctx = TurnContext {
        user: user.clone(),
        chat_id: chat.clone(),
        task_id: ticket.task_id.clone(),
        user_message_id: ticket.user_message_id.clone(),
        model_name: String::new(),
        category: None,
        connected_accounts: ticket
            .inbound
            .iter()
            .flat_map(|i| i.options.connected_accounts.iter().cloned())
            .collect(),
        privacy,
    };
    let sink: Arc<dyn TurnSink> = writer.clone();
    app.routines
        .answer(&ctx, &sink, &text, &ticket.cancel)
        .await
}
