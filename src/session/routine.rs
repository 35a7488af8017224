//! `cancel_routine`: stops one of the user's routine runs, running (here or on another
//! node) or waiting for the user.

use chatd_protocol::{ErrorCode, RoutineFinished, RoutineOutcome, ServerMessage};

use super::Session;
use crate::delivery::Audience;
use crate::routines::Cancelled;

impl Session {
    pub(super) async fn cancel_routine(&self, m: chatd_protocol::CancelRoutine) {
        match self.app.routines.cancel(&self.device.user, &m.run_id).await {
            // A run with no live slice cannot report its end: it is reported here.
            Cancelled::Ended(chat_id) => self.app.delivery.send(
                &self.device.user_hash,
                Audience::All,
                &ServerMessage::RoutineFinished(RoutineFinished {
                    chat_id,
                    run_id: m.run_id,
                    outcome: RoutineOutcome::Cancelled,
                }),
            ),
            // The running slice stops and sends its own `routine_finished`.
            Cancelled::Signalled => {}
            Cancelled::NotFound => self.error(ErrorCode::NotFound, "no routine run with this id"),
        }
    }
}
