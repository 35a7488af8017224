//! A slice's Rhai engine: the sandbox (see `sandbox.rs`) given the run context's functions,
//! each a method of the slice ([`super::slice`]): `emit`, `ask_user`, `run`, `skill`,
//! `model`, `drive_get`, `drive_set`. `state` is the frame's own map (see `state.rs`).

use std::sync::Arc;

use rhai::{Dynamic, Engine, ImmutableString, NativeCallContext};

use super::sandbox::sandbox;
use super::slice::Slice;
use super::state::State;

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
