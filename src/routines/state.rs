//! One frame's `state`: the map a routine's frame reads and writes as `state.key` or
//! `state["key"]`, shared by the slice (which snapshots it when the run pauses) and the
//! engine (which registers it as the script's `State` type).

use std::sync::{Arc, Mutex, PoisonError};

use rhai::{Dynamic, ImmutableString};

/// One frame's `state`: a map the script reads and writes as `state.key` or `state["key"]`.
#[derive(Clone, Default)]
pub struct State(pub Arc<Mutex<rhai::Map>>);

impl State {
    /// `state.key`: the value, or `()` when the key is not set.
    pub(super) fn get(&mut self, key: ImmutableString) -> Dynamic {
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(key.as_str()).cloned().unwrap_or(Dynamic::UNIT)
    }

    /// `state.key = value`.
    pub(super) fn set(&mut self, key: ImmutableString, value: Dynamic) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.insert(key.as_str().into(), value);
    }

    /// The map as JSON (`null` if it holds something JSON cannot say).
    pub fn snapshot(&self) -> serde_json::Value {
        let map = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        rhai::serde::from_dynamic(&Dynamic::from_map(map)).unwrap_or(serde_json::Value::Null)
    }
}
