//! One slice of a run: its script executed (on a blocking thread) from the start against
//! the run's journal, up to its end, its next `ask_user` or its budget. Each effect takes
//! the next position of the journal: a journaled one returns its result without running
//! again (a different request there is `journal_mismatch`); a new one runs (the async work
//! on the runtime, awaited from this thread), is journaled and the record is saved before
//! the script goes on. `ask_user` past the journal pauses the run.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use chatd_protocol::{RoutineErrorCode, RunId};
use rhai::{Dynamic, Engine, EvalAltResult, Position, Scope};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

mod effects;

use super::Inner;
use super::catalog::Routine;
pub use super::emit::EmitKind;
use super::journal::{EffectKind, Entry, FrameSnapshot, RunRecord};
use super::state::State;
use crate::config::RoutinesConfig;
use crate::crypto::UserHash;
use crate::pipeline::{TurnContext, TurnSink};

type Rhai<T> = Result<T, Box<EvalAltResult>>;

/// Why a slice stopped before its script ended.
#[derive(Debug, Clone)]
pub enum Stop {
    Paused {
        question: String,
    },
    Cancelled,
    Failed {
        code: RoutineErrorCode,
        message: String,
    },
}

/// How a slice ended.
#[derive(Debug, Clone)]
pub enum SliceEnd {
    Finished(Value),
    Stopped(Stop),
}

/// One slice of a run: what its effects need (the routines, the owner, the turn), its
/// budget, its journal cursor and its frames. Shared with the engine's functions.
pub struct Slice {
    pub(super) inner: Arc<Inner>,
    pub(super) owner: UserHash,
    pub(super) ctx: TurnContext,
    pub(super) sink: Arc<dyn TurnSink>,
    pub(super) cancel: CancellationToken,
    pub(super) handle: tokio::runtime::Handle,
    pub(super) deadline: Instant,
    pub(super) record: Mutex<RunRecord>,
    cursor: AtomicUsize,
    ops: AtomicU64,
    stopped: AtomicBool,
    stop: Mutex<Option<Stop>>,
    frames: Mutex<Vec<(Arc<Routine>, State)>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn to_json(d: &Dynamic) -> Value {
    rhai::serde::from_dynamic(d).unwrap_or(Value::Null)
}

fn to_dynamic(v: &Value) -> Dynamic {
    rhai::serde::to_dynamic(v).unwrap_or(Dynamic::UNIT)
}

fn failed(code: RoutineErrorCode, message: impl Into<String>) -> Stop {
    Stop::Failed {
        code,
        message: message.into(),
    }
}

impl Slice {
    pub(super) fn new(
        inner: Arc<Inner>,
        owner: UserHash,
        ctx: TurnContext,
        sink: Arc<dyn TurnSink>,
        cancel: CancellationToken,
        record: RunRecord,
    ) -> Self {
        let deadline = Instant::now() + inner.config.slice_time;
        Self {
            inner,
            owner,
            ctx,
            sink,
            cancel,
            handle: tokio::runtime::Handle::current(),
            deadline,
            record: Mutex::new(record),
            cursor: AtomicUsize::new(0),
            ops: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
            stop: Mutex::new(None),
            frames: Mutex::new(Vec::new()),
        }
    }

    pub fn config(&self) -> RoutinesConfig {
        self.inner.config.clone()
    }

    fn run_id(&self) -> RunId {
        lock(&self.record).run_id.clone()
    }

    /// Stops the script (once; the first reason wins) with an error no script can catch.
    fn halt(&self, stop: Stop) -> Box<EvalAltResult> {
        self.set_stop(stop);
        Box::new(EvalAltResult::ErrorTerminated(
            Dynamic::UNIT,
            Position::NONE,
        ))
    }

    fn set_stop(&self, stop: Stop) {
        let mut slot = lock(&self.stop);
        if slot.is_none() {
            *slot = Some(stop);
        }
        self.stopped.store(true, Ordering::Release);
    }

    /// The engine's progress hook: the operation budget, cancellation and the time budget.
    pub fn progress(&self) -> Option<Dynamic> {
        let n = self.ops.fetch_add(1, Ordering::Relaxed) + 1;
        if self.stopped.load(Ordering::Acquire) {
            return Some(Dynamic::UNIT);
        }
        let max = self.inner.config.max_operations;
        if n > max {
            self.set_stop(failed(
                RoutineErrorCode::OperationBudgetExceeded,
                format!("the routine ran more than {max} operations in one slice"),
            ));
            return Some(Dynamic::UNIT);
        }
        if n.is_multiple_of(512) {
            if self.cancel.is_cancelled() {
                self.set_stop(Stop::Cancelled);
                return Some(Dynamic::UNIT);
            }
            if Instant::now() > self.deadline {
                self.set_stop(self.time_out());
                return Some(Dynamic::UNIT);
            }
        }
        None
    }

    fn time_out(&self) -> Stop {
        failed(
            RoutineErrorCode::TimeBudgetExceeded,
            format!(
                "the routine ran longer than {:?} in one slice",
                self.inner.config.slice_time
            ),
        )
    }

    /// The routine of the innermost frame.
    fn current(&self) -> Option<Arc<Routine>> {
        lock(&self.frames).last().map(|(r, _)| r.clone())
    }

    /// Runs `routine` in a new frame (pushed now, popped when it returns).
    pub fn call(&self, engine: &Engine, routine: &Arc<Routine>, args: Dynamic) -> Rhai<Dynamic> {
        let state = {
            let mut frames = lock(&self.frames);
            if frames.len() >= self.inner.config.max_depth {
                drop(frames);
                return Err(self.halt(failed(
                    RoutineErrorCode::ScriptError,
                    format!(
                        "routines nest deeper than {} levels",
                        self.inner.config.max_depth
                    ),
                )));
            }
            let state = State::default();
            frames.push((routine.clone(), state.clone()));
            state
        };
        let mut scope = Scope::new();
        scope.push("args", args);
        scope.push("state", state);
        scope.push_constant("ctx", self.context_map(routine));
        let result = engine.eval_ast_with_scope::<Dynamic>(&mut scope, &routine.ast);
        lock(&self.frames).pop();
        result
    }

    /// `ctx`: the run and chat ids, the routine, and a user id that is not the user's own
    /// (a hash of the user's hash and the app).
    fn context_map(&self, routine: &Routine) -> Dynamic {
        let user = hex::encode(Sha256::digest(
            format!("routine-user\n{}\n{}", self.owner.as_str(), routine.app_id).as_bytes(),
        ));
        let mut map = rhai::Map::new();
        map.insert("run_id".into(), self.run_id().as_str().into());
        map.insert("chat_id".into(), self.ctx.chat_id.as_str().into());
        map.insert("user_id".into(), user[..32].into());
        map.insert("routine".into(), routine.full_id.as_str().into());
        Dynamic::from_map(map)
    }

    /// The next effect: replayed from the journal, or run now (`live` for a `run` result).
    fn effect(&self, kind: EffectKind, request: Value, live: Option<Value>) -> Rhai<Value> {
        if self.stopped.load(Ordering::Acquire) {
            return Err(self.halt(Stop::Cancelled));
        }
        let position = self.cursor.fetch_add(1, Ordering::SeqCst);
        {
            let record = lock(&self.record);
            if let Some(entry) = record.journal.get(position) {
                if entry.kind != kind || entry.request != request {
                    let message = format!(
                        "effect {position}: the journal holds a {:?} call, the script now asks for a {:?} call with other arguments",
                        entry.kind, kind
                    );
                    drop(record);
                    return Err(self.halt(failed(RoutineErrorCode::JournalMismatch, message)));
                }
                return Ok(entry.result.clone());
            }
            let max = self.inner.config.max_journal_entries;
            if record.journal.len() >= max {
                drop(record);
                return Err(self.halt(failed(
                    RoutineErrorCode::ScriptError,
                    format!("the run reached {max} effects"),
                )));
            }
        }
        if kind == EffectKind::Ask {
            let question = request["question"].as_str().unwrap_or_default().to_string();
            let frames = lock(&self.frames)
                .iter()
                .map(|(r, s)| FrameSnapshot {
                    routine: r.full_id.clone(),
                    state: s.snapshot(),
                })
                .collect();
            lock(&self.record).frames = frames;
            return Err(self.halt(Stop::Paused { question }));
        }
        let result = match live {
            Some(v) => v,
            None => self
                .handle
                .block_on(self.perform(kind, &request))
                .map_err(|stop| self.halt(stop))?,
        };
        let saved = {
            let mut record = lock(&self.record);
            record.journal.push(Entry {
                kind,
                request,
                result: result.clone(),
            });
            (kind != EffectKind::Emit).then(|| record.clone())
        };
        if let Some(record) = saved {
            let ttl = self.inner.config.run_ttl;
            self.handle
                .block_on(self.inner.store.put(&self.owner, &record, ttl))
                .map_err(|e| {
                    tracing::warn!(error = %e, "cannot journal a routine effect");
                    self.halt(failed(
                        RoutineErrorCode::JournalUnavailable,
                        "the run's journal cannot be saved; try again shortly",
                    ))
                })?;
        }
        Ok(result)
    }

    // The run context's functions (bound to the script's engine in `engine.rs`).

    pub fn emit(&self, kind: &str, text: String) -> Rhai<()> {
        if EmitKind::parse(kind).is_none() {
            return Err(self.halt(failed(
                RoutineErrorCode::ScriptError,
                format!("emit: unknown kind `{kind}` (status, message, information, error)"),
            )));
        }
        self.effect(EffectKind::Emit, json!({"kind": kind, "text": text}), None)
            .map(|_| ())
    }

    pub fn ask(&self, question: String) -> Rhai<Dynamic> {
        let answer = self.effect(EffectKind::Ask, json!({ "question": question }), None)?;
        Ok(to_dynamic(&answer))
    }

    pub fn run(&self, engine: &Engine, name: &str, args: Dynamic) -> Rhai<Dynamic> {
        let Some(routine) = self.inner.catalog.find(name).cloned() else {
            return Err(self.halt(failed(
                RoutineErrorCode::RoutineNotFound,
                format!("run: no routine `{name}`"),
            )));
        };
        let request = json!({"routine": routine.full_id, "args": to_json(&args)});
        let value = self.call(engine, &routine, args)?;
        let result = self.effect(EffectKind::Run, request, Some(to_json(&value)))?;
        Ok(to_dynamic(&result))
    }

    pub fn skill(&self, name: &str, args: Dynamic) -> Rhai<Dynamic> {
        let name = crate::pipeline::preprocess::normalize_tool_name(name);
        let request = json!({"skill": name, "args": to_json(&args)});
        Ok(to_dynamic(&self.effect(
            EffectKind::Skill,
            request,
            None,
        )?))
    }

    pub fn model(&self, prompt: String, schema: Option<Dynamic>) -> Rhai<Dynamic> {
        let schema = schema.map(|s| to_json(&s)).unwrap_or(Value::Null);
        let request = json!({"prompt": prompt, "schema": schema});
        Ok(to_dynamic(&self.effect(
            EffectKind::Model,
            request,
            None,
        )?))
    }

    fn app(&self) -> String {
        self.current().map(|r| r.app_id.clone()).unwrap_or_default()
    }

    pub fn drive_get(&self, key: &str) -> Rhai<Dynamic> {
        let request = json!({"app": self.app(), "key": key});
        Ok(to_dynamic(&self.effect(
            EffectKind::DriveGet,
            request,
            None,
        )?))
    }

    pub fn drive_set(&self, key: &str, value: Dynamic) -> Rhai<()> {
        let request = json!({"app": self.app(), "key": key, "value": to_json(&value)});
        self.effect(EffectKind::DriveSet, request, None).map(|_| ())
    }
}

/// Runs the slice's script to its end or its stop (on a blocking thread), in the engine
/// `bind` makes for it (the sandbox with the run context's functions bound to the slice).
pub fn execute(slice: Arc<Slice>, bind: impl FnOnce(&Arc<Slice>) -> Engine) -> SliceEnd {
    let name = lock(&slice.record).routine.clone();
    let Some(routine) = slice.inner.catalog.find(&name).cloned() else {
        return SliceEnd::Stopped(failed(
            RoutineErrorCode::RoutineNotFound,
            format!("no routine `{name}`"),
        ));
    };
    let args = to_dynamic(&lock(&slice.record).args);
    let engine = bind(&slice);
    let result = slice.call(&engine, &routine, args);
    drop(engine);
    if let Some(stop) = lock(&slice.stop).take() {
        return SliceEnd::Stopped(stop);
    }
    match result {
        Ok(value) => SliceEnd::Finished(to_json(&value)),
        Err(e) => SliceEnd::Stopped(match *e {
            EvalAltResult::ErrorTooManyOperations(..) => failed(
                RoutineErrorCode::OperationBudgetExceeded,
                format!(
                    "the routine ran more than {} operations in one slice",
                    slice.inner.config.max_operations
                ),
            ),
            EvalAltResult::ErrorTerminated(..) => Stop::Cancelled,
            other => failed(RoutineErrorCode::ScriptError, other.to_string()),
        }),
    }
}
