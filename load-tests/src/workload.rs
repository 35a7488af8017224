//! The mixed workload of `ttft-policy`: every connection holds one chat at a time (a new
//! one every `chat_turns` turns); a chat starts on its topic (software development for a
//! share `code_chats` of the chats, everyday questions for the rest), and each later turn
//! changes category from the chat's previous turn with probability `switch_share`, or
//! `jumpy_switch` in the share `jumpy_chats` of chats that jump between topics (real chats
//! are mostly steady, a few are not). A turn
//! about code carries [`CODE_MARKER`], which makes the two-speed fake LLM answer
//! preprocessing with `software_development`. Everything is a pure function of the seed,
//! the connection's slot and the turn's index, so every chatd lane sees the same turns.

use crate::fake_llm::CODE_MARKER;

#[derive(Clone, Copy, Debug)]
pub struct Workload {
    pub seed: u64,
    /// Share of turns (after a chat's first) whose category differs from the previous one,
    /// in a steady chat.
    pub switch_share: f64,
    /// Share of chats that jump between topics...
    pub jumpy_chats: f64,
    /// ...and the share of their turns that change category.
    pub jumpy_switch: f64,
    /// Share of chats whose first turn is about code.
    pub code_chats: f64,
    /// Turns per chat (0: one chat per connection).
    pub chat_turns: u64,
}

/// One turn of the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Planned {
    /// The connection's chat number (a new chat every `chat_turns` turns).
    pub chat: u64,
    /// The turn's index within its chat (0: a new chat).
    pub index_in_chat: u64,
    /// About code (carries the marker).
    pub code: bool,
    /// Its category differs from the chat's previous turn.
    pub changed: bool,
}

const GENERAL: [&str; 6] = [
    "What is the best time of year to visit Lisbon?",
    "How many days should I plan for Porto?",
    "Which small towns near the coast are worth a stop?",
    "Is it easy to get around by train there?",
    "What local dishes should I try?",
    "Thanks, what should I pack for the trip?",
];

const CODE: [&str; 6] = [
    "Why does my Rust function not compile when I return a reference?",
    "How do I write a unit test for this parser?",
    "Can you fix the borrow checker error about a moved value in my loop?",
    "What is the difference between a Box and an Rc?",
    "How do I read a file line by line with tokio?",
    "Thanks, how would I benchmark that function?",
];

/// splitmix64: a seeded, stateless stream of well-mixed numbers.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Workload {
    /// A number in [0, 1) drawn from the seed and `keys`.
    fn unit(&self, keys: [u64; 3]) -> f64 {
        let h = keys.iter().fold(mix(self.seed), |h, k| mix(h ^ k));
        (h >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Turn `n` (from 0) of the connection in `slot`.
    pub fn turn(&self, slot: u64, n: u64) -> Planned {
        let (chat, index_in_chat) = match self.chat_turns {
            0 => (0, n),
            k => (n / k, n % k),
        };
        let mut code = self.unit([slot, chat, u64::MAX]) < self.code_chats;
        let share = match self.unit([slot, chat, u64::MAX - 1]) < self.jumpy_chats {
            true => self.jumpy_switch,
            false => self.switch_share,
        };
        let mut changed = false;
        for j in 1..=index_in_chat {
            changed = self.unit([slot, chat, j]) < share;
            code ^= changed;
        }
        Planned {
            chat,
            index_in_chat,
            code,
            changed,
        }
    }

    /// The message text of turn `n` as planned.
    pub fn text(t: &Planned, n: u64) -> String {
        let i = (n % GENERAL.len() as u64) as usize;
        if t.code {
            format!("{CODE_MARKER} {}", CODE[i])
        } else {
            GENERAL[i].to_string()
        }
    }

    /// What turns `from..to` of slots `0..slots` hold.
    pub fn census(&self, slots: u64, from: u64, to: u64) -> Census {
        let mut c = Census::default();
        for slot in 0..slots {
            for n in from..to {
                let t = self.turn(slot, n);
                c.turns += 1;
                c.code += u64::from(t.code);
                c.changed += u64::from(t.changed);
                if t.index_in_chat == 0 {
                    c.new_chats += 1;
                    c.new_code_chats += u64::from(t.code);
                }
            }
        }
        c
    }
}

/// Counts over a range of the workload's turns.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Census {
    pub turns: u64,
    /// Turns about code.
    pub code: u64,
    /// Turns whose category differs from their chat's previous turn.
    pub changed: u64,
    /// First turns of a chat (chatd has no previous plan to guess from).
    pub new_chats: u64,
    /// Of those, about code (chatd's guess for a new chat is the unremarkable plan, which
    /// is the general category).
    pub new_code_chats: u64,
}

impl Census {
    /// Turns where a guess from the chat's previous plan (or the unremarkable plan for a new
    /// chat) has the wrong category.
    pub fn expected_misses(&self) -> u64 {
        self.changed + self.new_code_chats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_of_changes_follows_the_flag_and_lanes_agree() {
        let w = Workload {
            seed: 7,
            switch_share: 0.2,
            jumpy_chats: 0.0,
            jumpy_switch: 0.5,
            code_chats: 0.25,
            chat_turns: 0,
        };
        let c = w.census(4, 0, 1500);
        let share = c.changed as f64 / (c.turns - c.new_chats) as f64;
        assert!((share - 0.2).abs() < 0.03, "{share}");
        assert_eq!(w.turn(3, 17), w.turn(3, 17));
        let mut prev = w.turn(1, 0).code;
        for n in 1..200 {
            let t = w.turn(1, n);
            assert_eq!(t.changed, t.code != prev);
            prev = t.code;
        }
    }
}
