//! The Rhai engine routines run in: sandboxed (no modules, no `eval`, output discarded,
//! bounded strings, arrays, maps and nesting) and, for a slice, given the run context's
//! functions, each a method of the slice ([`super::slice`]): `emit`, `ask_user`, `run`,
//! `skill`, `model`, `drive_get`, `drive_set`. `state` is the frame's own map.

use std::sync::{Arc, Mutex, PoisonError};

use rhai::{Dynamic, Engine, ImmutableString, NativeCallContext};

use super::slice::Slice;
use crate::config::RoutinesConfig;

/// An engine that can compile and run scripts and do nothing else.
pub fn sandbox(config: &RoutinesConfig) -> Engine {
    let mut engine = Engine::new();
    engine
        .set_module_resolver(rhai::module_resolvers::DummyModuleResolver::new())
        .set_max_operations(config.max_operations)
        .set_max_call_levels(64)
        .set_max_expr_depths(64, 32)
        .set_max_string_size(1 << 20)
        .set_max_array_size(10_000)
        .set_max_map_size(10_000)
        .set_max_variables(1_000)
        .set_max_functions(1_000)
        .disable_symbol("eval");
    engine.on_print(|_| {});
    engine.on_debug(|_, _, _| {});
    engine
}

/// One frame's `state`: a map the script reads and writes as `state.key` or `state["key"]`.
#[derive(Clone, Default)]
pub struct State(pub Arc<Mutex<rhai::Map>>);

impl State {
    fn get(&mut self, key: ImmutableString) -> Dynamic {
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(key.as_str()).cloned().unwrap_or(Dynamic::UNIT)
    }

    fn set(&mut self, key: ImmutableString, value: Dynamic) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.insert(key.as_str().into(), value);
    }

    pub fn snapshot(&self) -> serde_json::Value {
        let map = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        rhai::serde::from_dynamic(&Dynamic::from_map(map)).unwrap_or(serde_json::Value::Null)
    }
}

/// The sandbox with the run context's functions bound to `slice`.
pub fn for_slice(slice: &Arc<Slice>) -> Engine {
    let mut engine = sandbox(&slice.config());
    engine
        .register_type_with_name::<State>("State")
        .register_indexer_get_set(State::get, State::set);
    let s = slice.clone();
    engine.on_progress(move |_| s.progress());
    let s = slice.clone();
    engine.register_fn("emit", move |kind: ImmutableString, text: Dynamic| {
        s.emit(&kind, text.to_string())
    });
    let s = slice.clone();
    engine.register_fn("ask_user", move |question: Dynamic| {
        s.ask(question.to_string())
    });
    let s = slice.clone();
    engine.register_fn(
        "run",
        move |ncc: NativeCallContext, name: ImmutableString, args: Dynamic| {
            s.run(ncc.engine(), &name, args)
        },
    );
    let s = slice.clone();
    engine.register_fn(
        "run",
        move |ncc: NativeCallContext, name: ImmutableString| {
            s.run(ncc.engine(), &name, Dynamic::from_map(rhai::Map::new()))
        },
    );
    let s = slice.clone();
    engine.register_fn("skill", move |name: ImmutableString, args: Dynamic| {
        s.skill(&name, args)
    });
    let s = slice.clone();
    engine.register_fn("model", move |prompt: Dynamic| {
        s.model(prompt.to_string(), None)
    });
    let s = slice.clone();
    engine.register_fn("model", move |prompt: Dynamic, schema: rhai::Map| {
        s.model(prompt.to_string(), Some(Dynamic::from_map(schema)))
    });
    let s = slice.clone();
    engine.register_fn("drive_get", move |key: ImmutableString| s.drive_get(&key));
    let s = slice.clone();
    engine.register_fn("drive_set", move |key: ImmutableString, value: Dynamic| {
        s.drive_set(&key, value)
    });
    engine
}
