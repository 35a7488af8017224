//! The first stage: the turn's history from the AI cache or the client's re-send; or a
//! request for it (`request_chat_history`, `request_chat_embeds`), or a typed refusal when
//! it is invalid or the cache fails; or a routine waiting in the chat takes the message as
//! its answer; or nothing, for messages another turn answered meanwhile. Then
//! `ai_task_initiated`.

use std::sync::Arc;

use chatd_protocol::ErrorCode;

use super::{Settled, Turn};
use crate::cache::ai::MessageSeen;
use crate::delivery::Audience;
use crate::delivery::frames::Notice;
use crate::history::{self, Prepared};
use crate::inbound::MessageOptions;
use crate::metrics::{OutcomeLabel, ReasonLabel};
use crate::pipeline::HistoryEntry;
use crate::pipeline::models::Models;
use crate::privacy::ChatPrivacy;
use crate::turn::report::reason_label;
use crate::turn::writer::TurnWriter;

/// How the first stage ends.
pub(in crate::turn) enum Start {
    Ready(Ready),
    /// The turn ends without an answer: it asks for the history or embeds, or refuses the
    /// message with a typed error; the client may send it again at once.
    Ask(Ask),
    /// Cancelled, or answered by a waiting routine.
    Ended,
}

/// The turn's last word when it ends without an answer (`request_chat_history`,
/// `request_chat_embeds`, or a typed error), written once the chat's turn is over (see
/// `run_turns`): the client's re-send must find the chat free, not this turn finishing.
pub(in crate::turn) struct Ask {
    writer: Arc<TurnWriter>,
    audience: Audience,
    notice: Notice,
}

impl Ask {
    pub(in crate::turn) async fn send(self) {
        self.writer.notice(self.audience, self.notice);
        self.writer.flushed().await;
    }
}

/// A turn with its history, ready to be planned.
pub(in crate::turn) struct Ready {
    pub(in crate::turn) history: Vec<HistoryEntry>,
    /// The client's options of the newest message.
    pub(in crate::turn) opts: MessageOptions,
    /// The chat's first message (and the client did not say it has a title).
    pub(in crate::turn) first_message: bool,
    /// The client said the chat has a title.
    pub(in crate::turn) has_title: bool,
    /// The chat's pseudonymisation (`None`: off).
    pub(in crate::turn) privacy: Option<Arc<ChatPrivacy>>,
    /// The model catalog as the turn reaches it (through `privacy`).
    pub(in crate::turn) models: Models,
}

impl Turn<'_> {
    /// Whether every message of the turn was answered by another turn meanwhile: a node
    /// that took a message and then stalled (paused, or waiting on the store) admits it
    /// late, after the client's copy sent elsewhere was taken as new (the store had lost
    /// the first claim) and answered. That turn held the chat's lease before this one and
    /// settled the message before letting it go, so the chat's record of message ids tells.
    async fn answered_meanwhile(&self) -> bool {
        let inbound = &self.ticket.inbound;
        for i in inbound.iter() {
            let seen = (self.deps.ai_cache).claim_message(&self.owner, self.chat, i.message_id());
            if !matches!(seen.await, Ok(MessageSeen::Answered(_))) {
                return false;
            }
        }
        !inbound.is_empty()
    }

    /// The turn's history; or what to ask the client for; or the turn ended here (refused,
    /// cancelled, answered meanwhile, or a routine answered).
    pub(in crate::turn) async fn prepare(&self) -> Start {
        let (app, ticket) = (self.deps.as_ref(), self.ticket);
        let history = history::prepare(&app.ai_cache, &self.owner, self.chat, &ticket.inbound);
        let answered = self.answered_meanwhile();
        let (prepared, privacy, answered) = tokio::select! {
            biased;
            _ = ticket.cancel.cancelled() => return Start::Ended,
            p = futures_util::future::join3(history, self.load_privacy(), answered) => p,
        };
        if answered {
            tracing::info!("the turn's messages were answered meanwhile; not answered again");
            return Start::Ended;
        }
        let history = match prepared {
            Ok(Prepared::Ready(history)) => history,
            Ok(Prepared::NeedHistory(request)) => {
                self.count_history_request(reason_label(request.reason));
                // Recorded first: the copy with the history may come back at once.
                self.settle(Settled::AwaitingHistory).await;
                return self.ask(Notice::NeedHistory(request));
            }
            Ok(Prepared::NeedEmbeds(request)) => {
                self.count_history_request("missing_embeds");
                // Like a history request: the copy with the embeds may come back at once.
                self.settle(Settled::AwaitingHistory).await;
                return self.ask(Notice::NeedEmbeds(request));
            }
            Ok(Prepared::Invalid(reason)) => {
                self.settle(Settled::Unanswered).await;
                return self.refuse(ErrorCode::InvalidChatHistory, reason);
            }
            Err(fault) => {
                tracing::warn!(error = %fault, "history unavailable; turn not started");
                let (code, text) = fault.code();
                self.settle(Settled::Unanswered).await;
                return self.refuse(code, text);
            }
        };
        // A routine waiting in this chat takes the message as its answer.
        let waiting = crate::turn::routine::answer;
        if waiting(
            app,
            self.user,
            self.chat,
            ticket,
            &self.writer,
            privacy.clone(),
        )
        .await
        {
            self.settle(Settled::Answered).await;
            self.writer.flushed().await;
            return Start::Ended;
        }
        self.writer.notice(self.requesters(), Notice::Started);
        let opts = ticket
            .inbound
            .last()
            .map(|i| i.options.clone())
            .unwrap_or_default();
        let has_title = ticket
            .inbound
            .iter()
            .any(|i| i.message.chat_has_title || i.message.current_chat_title.is_some());
        let first_message = !has_title
            && ticket
                .inbound
                .first()
                .is_some_and(|i| i.prior_messages == 0)
            && history.len() <= ticket.inbound.len();
        let models = self.turn_models(privacy.as_ref());
        Start::Ready(Ready {
            history,
            opts,
            first_message,
            has_title,
            privacy,
            models,
        })
    }

    fn ask(&self, notice: Notice) -> Start {
        Start::Ask(Ask {
            writer: self.writer.clone(),
            audience: self.requesters(),
            notice,
        })
    }

    fn count_history_request(&self, reason: &'static str) {
        self.deps
            .metrics
            .history_requests
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    /// Ends a turn that could not start: a typed error to the devices that asked.
    fn refuse(&self, code: ErrorCode, message: String) -> Start {
        self.deps
            .metrics
            .turns
            .get_or_create(&OutcomeLabel { outcome: "refused" })
            .inc();
        self.ask(Notice::Refused { code, message })
    }
}
