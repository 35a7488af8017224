//! The Lua scripts of the Redis turn store. Each touches the keys of one chat (hash tag
//! `{c:<chat>}`), so it is atomic on one Redis server and on one Cluster slot alike. Times
//! come from the server (`TIME`), so the nodes' clocks do not matter.
//!
//! A lease is a hash: task, message, gen, node, owner, until (ms since the epoch).

/// Common prelude: `now` in ms, and `lease_of(key)` → table or nil.
const PRELUDE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function lease_of(key)
  local v = redis.call('HMGET', key, 'task', 'message', 'gen', 'node', 'owner', 'until')
  if not v[1] then return nil end
  return {task = v[1], message = v[2], gen = v[3], node = v[4], owner = v[5], untl = tonumber(v[6])}
end
local function reply(kind, l)
  return {kind, l.task, l.message, tostring(l.gen), l.node, l.owner, tostring(l.untl)}
end
"#;

/// KEYS: lease, gen, queue, queued. ARGV: task, message, node, owner, lease ms, value,
/// max queue, keep ms. Starts the turn, or queues the message, or refuses it. An expired
/// lease holds the chat until it is taken over (its turn is ended first).
pub const ADMIT: &str = r#"
local l = lease_of(KEYS[1])
if l then
  if l.owner ~= ARGV[4] then return {'foreign'} end
  if l.message == ARGV[2] then return reply('running', l) end
  if redis.call('HEXISTS', KEYS[4], ARGV[2]) == 1 then
    redis.call('HSET', KEYS[4], ARGV[2], ARGV[6])
    return reply('queued', l)
  end
  if redis.call('LLEN', KEYS[3]) >= tonumber(ARGV[7]) then
    return reply('full', l)
  end
  redis.call('RPUSH', KEYS[3], ARGV[2])
  redis.call('HSET', KEYS[4], ARGV[2], ARGV[6])
  redis.call('PEXPIRE', KEYS[3], ARGV[8])
  redis.call('PEXPIRE', KEYS[4], ARGV[8])
  return reply('queued', l)
end
local gen = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[8])
local n = {task = ARGV[1], message = ARGV[2], gen = gen, node = ARGV[3], owner = ARGV[4],
           untl = now + tonumber(ARGV[5])}
redis.call('HSET', KEYS[1], 'task', n.task, 'message', n.message, 'gen', n.gen,
           'node', n.node, 'owner', n.owner, 'until', n.untl)
redis.call('PEXPIRE', KEYS[1], ARGV[8])
return reply('started', n)
"#;

/// KEYS: lease, cancel flag, gen. ARGV: task, gen, lease ms, message, node, owner, keep
/// ms. Extends a live lease. With no lease and no newer generation (the data was lost:
/// Redis restarted empty) the running turn holds the chat again: 'reclaimed'.
pub const RENEW: &str = r#"
local l = lease_of(KEYS[1])
if not l then
  if tonumber(redis.call('GET', KEYS[3]) or '0') > tonumber(ARGV[2]) then return {'fenced'} end
  local untl = now + tonumber(ARGV[3])
  redis.call('HSET', KEYS[1], 'task', ARGV[1], 'message', ARGV[4], 'gen', ARGV[2],
             'node', ARGV[5], 'owner', ARGV[6], 'until', untl)
  redis.call('PEXPIRE', KEYS[1], ARGV[7])
  redis.call('SET', KEYS[3], ARGV[2], 'PX', ARGV[7])
  return {'reclaimed', tostring(untl), ''}
end
if l.task ~= ARGV[1] or l.gen ~= ARGV[2] or l.untl <= now then
  return {'fenced'}
end
local untl = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'until', untl)
local cancel = redis.call('GET', KEYS[2]) or ''
return {'ok', tostring(untl), cancel}
"#;

/// KEYS: lease, gen, queue, queued, cancel flag. ARGV: task, gen, next task, lease ms,
/// keep ms. Hands the queue to the next turn or frees the chat.
pub const FINISH: &str = r#"
local l = lease_of(KEYS[1])
if not l or l.task ~= ARGV[1] or l.gen ~= ARGV[2] then
  return {'fenced'}
end
redis.call('DEL', KEYS[5])
local ids = redis.call('LRANGE', KEYS[3], 0, -1)
if #ids == 0 then
  redis.call('DEL', KEYS[1])
  return {'free'}
end
local values = redis.call('HMGET', KEYS[4], unpack(ids))
redis.call('DEL', KEYS[3], KEYS[4])
local gen = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
local n = {task = ARGV[3], message = ids[#ids], gen = gen, node = l.node, owner = l.owner,
           untl = now + tonumber(ARGV[4])}
redis.call('HSET', KEYS[1], 'task', n.task, 'message', n.message, 'gen', n.gen, 'until', n.untl)
local out = reply('next', n)
for _, v in ipairs(values) do
  if v then table.insert(out, v) end
end
return out
"#;

/// KEYS: lease. The live lease, if any.
pub const ACTIVE: &str = r#"
local l = lease_of(KEYS[1])
if not l or l.untl <= now then return {'none'} end
return reply('live', l)
"#;

/// KEYS: lease, gen, log meta of the lease's task. ARGV: task, node, lease ms. Moves an
/// expired lease to this node under the next generation and fences the task's log, when
/// there is one (an absent log stays absent: its writer may be about to put it back).
pub const TAKE_OVER: &str = r#"
local l = lease_of(KEYS[1])
if not l then return {'gone'} end
if l.task ~= ARGV[1] then return {'moved', tostring(l.untl)} end
if l.untl > now then return {'live', tostring(l.untl)} end
local gen = redis.call('INCR', KEYS[2])
l.gen = gen
l.node = ARGV[2]
l.untl = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'gen', gen, 'node', l.node, 'until', l.untl)
if redis.call('EXISTS', KEYS[3]) == 1 then
  local fence = tonumber(redis.call('HGET', KEYS[3], 'fence') or '0')
  if gen > fence then redis.call('HSET', KEYS[3], 'fence', gen) end
end
return reply('taken', l)
"#;

/// KEYS: cancel flag, queue, queued. ARGV: reason, ttl ms, drop queue (1/0).
pub const CANCEL: &str = r#"
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if ARGV[3] == '1' then redis.call('DEL', KEYS[2], KEYS[3]) end
return 1
"#;

/// KEYS: stream, meta. ARGV: gen, entry, max len, keep ms, index, contiguous ('1'). Appends
/// under the fence at the writer's index (an index the log has passed is a repeat: nothing
/// written). → the index; -1 fenced; -2 - last when contiguous and the log's newest is
/// older than index - 1 (nothing written, not even the fence: a log the store lost stays
/// absent until its writer puts its frames back).
pub const LOG_APPEND: &str = r#"
if redis.call('HGET', KEYS[2], 'ended') == '1' then return -1 end
local fence = tonumber(redis.call('HGET', KEYS[2], 'fence') or '0')
local gen = tonumber(ARGV[1])
if gen < fence then return -1 end
local index = tonumber(ARGV[5])
local last = tonumber(redis.call('HGET', KEYS[2], 'last') or '0')
if ARGV[6] == '1' and index > last + 1 then return -2 - last end
if gen > fence then redis.call('HSET', KEYS[2], 'fence', gen) end
if index <= last then return index end
redis.call('HSET', KEYS[2], 'last', index)
redis.call('XADD', KEYS[1], 'MAXLEN', ARGV[3], index .. '-0', 'v', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return index
"#;

/// KEYS: stream, meta. ARGV: after. → {last, ended, first, id1, v1, id2, v2, ...} or {}.
pub const LOG_READ: &str = r#"
if redis.call('EXISTS', KEYS[2]) == 0 then return {} end
local last = redis.call('HGET', KEYS[2], 'last') or '0'
local ended = redis.call('HGET', KEYS[2], 'ended') or '0'
local head = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
local first = '0'
if #head > 0 then first = string.match(head[1][1], '^(%d+)') end
local out = {last, ended, first}
local from = '(' .. ARGV[1] .. '-0'
for _, e in ipairs(redis.call('XRANGE', KEYS[1], from, '+')) do
  table.insert(out, string.match(e[1], '^(%d+)'))
  table.insert(out, e[2][2])
end
return out
"#;

/// KEYS: stream, meta. ARGV: keep ms, gen. Marks the log ended, unless it is fenced to a
/// newer generation (-1).
pub const LOG_END: &str = r#"
if redis.call('EXISTS', KEYS[2]) == 0 then return 0 end
local fence = tonumber(redis.call('HGET', KEYS[2], 'fence') or '0')
if tonumber(ARGV[2]) < fence then return -1 end
redis.call('HSET', KEYS[2], 'ended', '1')
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
return 1
"#;

/// A script with the prelude.
pub fn with_prelude(body: &str) -> String {
    format!("{PRELUDE}{body}")
}
