//! The sandbox routines run in: a Rhai engine with no modules, no `eval`, output discarded,
//! and bounded operations, strings, arrays, maps, variables, functions and nesting. The
//! catalog compiles scripts in it; a slice runs them in it with the run context's functions
//! bound (see `engine.rs`).

use rhai::Engine;

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
