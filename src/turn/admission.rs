//! One active AI turn per chat on this node: admission (start, queue or refuse),
//! cancellation by the owner, and hand-over to the next turn when queued messages are
//! waiting (all messages queued behind a turn are answered together by one follow-up turn).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use chatd_protocol::{ChatId, MessageId, TaskId};
use tokio_util::sync::CancellationToken;

use super::Inbound;
use crate::auth::UserId;
use crate::delivery::ConnectionId;
use crate::pipeline::Interruption;

/// What a started turn needs to run and to be cancelled.
#[derive(Clone)]
pub struct TurnTicket {
    pub task_id: TaskId,
    /// The newest message this turn answers.
    pub user_message_id: MessageId,
    /// The messages this turn answers, oldest first (several when queued ones merged).
    pub inbound: Arc<[Inbound]>,
    /// Devices that sent the messages this turn answers (they get `ai_task_initiated`).
    pub requesters: Vec<ConnectionId>,
    pub cancel: CancellationToken,
    revoked: Arc<AtomicBool>,
    /// The chat was deleted: the turn must not write anything back.
    abandoned: Arc<AtomicBool>,
}

impl TurnTicket {
    /// The chat was deleted while this turn ran: cache nothing, postprocess nothing.
    pub fn abandoned(&self) -> bool {
        self.abandoned.load(Ordering::Acquire)
    }

    /// Why `cancel` fired: a user's `cancel_ai_task`, or else server shutdown.
    pub fn interruption(&self) -> Interruption {
        if self.revoked.load(Ordering::Acquire) {
            Interruption::Cancelled
        } else {
            Interruption::Shutdown
        }
    }
}

pub enum Admission {
    Start(TurnTicket),
    Queued { active_task_id: TaskId },
    QueueFull,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CancelError {
    #[error("no running task with this id")]
    NotFound,
    #[error("the task belongs to another user")]
    Forbidden,
}

struct ActiveTurn {
    owner: UserId,
    ticket: TurnTicket,
    queue: VecDeque<Inbound>,
}

#[derive(Default)]
struct Inner {
    by_chat: HashMap<ChatId, ActiveTurn>,
    by_task: HashMap<TaskId, ChatId>,
}

/// A std Mutex: every critical section is a few map operations, never an await.
#[derive(Default)]
pub struct Turns {
    inner: Mutex<Inner>,
}

impl Turns {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a turn for the message, or queues it behind the running one.
    pub fn admit(
        &self,
        user: &UserId,
        chat: &ChatId,
        inbound: Inbound,
        parent: &CancellationToken,
        max_queue: usize,
    ) -> Admission {
        let mut inner = self.lock();
        if let Some(active) = inner.by_chat.get_mut(chat) {
            if let Some(queued) = active
                .queue
                .iter_mut()
                .find(|q| q.message_id() == inbound.message_id())
            {
                // A re-send of a queued message (e.g. with history): the newest copy wins.
                *queued = inbound;
                return Admission::Queued {
                    active_task_id: active.ticket.task_id.clone(),
                };
            }
            if active.queue.len() >= max_queue {
                return Admission::QueueFull;
            }
            active.queue.push_back(inbound);
            return Admission::Queued {
                active_task_id: active.ticket.task_id.clone(),
            };
        }
        let Some(ticket) = new_ticket(vec![inbound], parent) else {
            return Admission::QueueFull;
        };
        inner.by_task.insert(ticket.task_id.clone(), chat.clone());
        inner.by_chat.insert(
            chat.clone(),
            ActiveTurn {
                owner: user.clone(),
                ticket: ticket.clone(),
                queue: VecDeque::new(),
            },
        );
        Admission::Start(ticket)
    }

    /// The running task of a chat, if any.
    pub fn active_task(&self, chat: &ChatId) -> Option<TaskId> {
        self.lock()
            .by_chat
            .get(chat)
            .map(|a| a.ticket.task_id.clone())
    }

    /// Cancels a running task on behalf of `user`.
    pub fn cancel(&self, user: &UserId, task: &TaskId) -> Result<(), CancelError> {
        let inner = self.lock();
        let chat = inner.by_task.get(task).ok_or(CancelError::NotFound)?;
        let active = inner.by_chat.get(chat).ok_or(CancelError::NotFound)?;
        if &active.owner != user {
            return Err(CancelError::Forbidden);
        }
        active.ticket.revoked.store(true, Ordering::Release);
        active.ticket.cancel.cancel();
        Ok(())
    }

    /// The chat is being deleted: cancels its running turn (which then writes nothing back)
    /// and drops the messages queued behind it. Only the owner's chat is touched.
    pub fn abandon(&self, user: &UserId, chat: &ChatId) {
        let mut inner = self.lock();
        let Some(active) = inner.by_chat.get_mut(chat) else {
            return;
        };
        if &active.owner != user {
            return;
        }
        active.queue.clear();
        active.ticket.abandoned.store(true, Ordering::Release);
        active.ticket.revoked.store(true, Ordering::Release);
        active.ticket.cancel.cancel();
    }

    /// Ends `task`; if messages were queued meanwhile, returns the ticket of the turn that
    /// answers them all (the chat stays busy), else frees the chat.
    pub fn finish(
        &self,
        chat: &ChatId,
        task: &TaskId,
        parent: &CancellationToken,
    ) -> Option<TurnTicket> {
        let mut inner = self.lock();
        inner.by_task.remove(task);
        let active = inner.by_chat.get_mut(chat)?;
        if &active.ticket.task_id != task {
            return None;
        }
        if active.queue.is_empty() || parent.is_cancelled() {
            inner.by_chat.remove(chat);
            return None;
        }
        let queued: Vec<_> = active.queue.drain(..).collect();
        let ticket = new_ticket(queued, parent)?;
        active.ticket = ticket.clone();
        inner.by_task.insert(ticket.task_id.clone(), chat.clone());
        Some(ticket)
    }
}

/// A ticket for the given messages (`None` when there are none).
fn new_ticket(inbound: Vec<Inbound>, parent: &CancellationToken) -> Option<TurnTicket> {
    let user_message_id = inbound.last()?.message_id().clone();
    let mut requesters: Vec<ConnectionId> = Vec::with_capacity(inbound.len());
    for i in &inbound {
        if !requesters.contains(&i.conn) {
            requesters.push(i.conn);
        }
    }
    Some(TurnTicket {
        task_id: TaskId::random(),
        user_message_id,
        inbound: inbound.into(),
        requesters,
        cancel: parent.child_token(),
        revoked: Arc::new(AtomicBool::new(false)),
        abandoned: Arc::new(AtomicBool::new(false)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::turn::MessageOptions;
    use chatd_protocol::UserMessage;

    fn inbound(id: &str, conn: ConnectionId) -> Inbound {
        Inbound {
            message: UserMessage {
                message_id: MessageId::parse(id).unwrap(),
                role: chatd_protocol::Role::User,
                content: format!("text of {id}"),
                created_at: 1,
                sender_name: None,
                temp_id: None,
                chat_has_title: false,
                current_chat_title: None,
                message_history: None,
            },
            embeds: Vec::new(),
            conn,
            prior_messages: 0,
            options: MessageOptions::default(),
        }
    }

    fn ids() -> (UserId, UserId, ChatId) {
        (
            UserId::parse("a").unwrap(),
            UserId::parse("b").unwrap(),
            ChatId::parse("c").unwrap(),
        )
    }

    #[test]
    fn one_turn_per_chat_then_merged_follow_up() {
        let (a, _, chat) = ids();
        let root = CancellationToken::new();
        let turns = Turns::default();
        let Admission::Start(t1) = turns.admit(&a, &chat, inbound("m1", 1), &root, 10) else {
            panic!("first message must start a turn")
        };
        for m in ["m2", "m3"] {
            assert!(matches!(
                turns.admit(&a, &chat, inbound(m, 2), &root, 10),
                Admission::Queued { ref active_task_id } if active_task_id == &t1.task_id
            ));
        }
        let t2 = turns.finish(&chat, &t1.task_id, &root).unwrap();
        assert_eq!(t2.user_message_id.as_str(), "m3");
        assert_eq!(t2.requesters, vec![2]);
        let merged: Vec<_> = t2.inbound.iter().map(|i| i.message_id().as_str()).collect();
        assert_eq!(merged, ["m2", "m3"]);
        assert!(turns.finish(&chat, &t2.task_id, &root).is_none());
        assert!(turns.active_task(&chat).is_none());
    }

    #[test]
    fn abandoning_a_deleted_chat_drops_its_queue_and_marks_the_turn() {
        let (a, b, chat) = ids();
        let root = CancellationToken::new();
        let turns = Turns::default();
        let Admission::Start(t) = turns.admit(&a, &chat, inbound("m1", 1), &root, 10) else {
            panic!()
        };
        let _ = turns.admit(&a, &chat, inbound("m2", 1), &root, 10);
        turns.abandon(&b, &chat);
        assert!(!t.cancel.is_cancelled() && !t.abandoned(), "not b's chat");
        turns.abandon(&a, &chat);
        assert!(t.cancel.is_cancelled() && t.abandoned());
        assert_eq!(t.interruption(), Interruption::Cancelled);
        assert!(
            turns.finish(&chat, &t.task_id, &root).is_none(),
            "the queued message is not answered"
        );
        assert!(turns.active_task(&chat).is_none());
    }

    #[test]
    fn cancel_checks_owner_and_marks_revocation() {
        let (a, b, chat) = ids();
        let root = CancellationToken::new();
        let turns = Turns::default();
        let Admission::Start(t) = turns.admit(&a, &chat, inbound("m1", 1), &root, 10) else {
            panic!()
        };
        assert_eq!(turns.cancel(&b, &t.task_id), Err(CancelError::Forbidden));
        assert!(!t.cancel.is_cancelled());
        assert_eq!(
            turns.cancel(&a, &TaskId::random()),
            Err(CancelError::NotFound)
        );
        turns.cancel(&a, &t.task_id).unwrap();
        assert!(t.cancel.is_cancelled());
        assert_eq!(t.interruption(), Interruption::Cancelled);
    }

    #[test]
    fn queue_is_bounded() {
        let (a, _, chat) = ids();
        let root = CancellationToken::new();
        let turns = Turns::default();
        let _ = turns.admit(&a, &chat, inbound("m0", 1), &root, 1);
        assert!(matches!(
            turns.admit(&a, &chat, inbound("m1", 1), &root, 1),
            Admission::Queued { .. }
        ));
        assert!(matches!(
            turns.admit(&a, &chat, inbound("m2", 1), &root, 1),
            Admission::QueueFull
        ));
    }
}
