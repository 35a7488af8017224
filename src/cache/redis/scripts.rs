//! The Lua scripts of the Redis backend, one per compound operation (each atomic on the
//! server); the AI ones share one block of Lua for appending, evicting and dropping a chat.
//! Every key a script touches is a key of one user: the scripts get the user's hash tag
//! `{u:<hash>}` (`keys::tag`) and build the names of `backend::keys` from it, so on a Redis
//! Cluster all of them are in the slot of the script's declared keys.

/// Lua shared by the AI scripts. `drop_chat` removes a chat's messages, its embeds that no
/// chat in `keep` references, its embed index, its settings/memories entries and its summary.
/// `append_and_evict` is the append of an AI write — KEYS: messages, lru; ARGV: (unused),
/// ttl, max_messages, max_chats, score, user_tag, chat, entries... — it pushes the entries,
/// trims, refreshes TTLs and recency and evicts the least recently used chats beyond
/// max_chats, returning them.
macro_rules! ai_lua {
    () => {
        r#"
local function drop_chat(tag, c, keep)
  redis.call('DEL', tag .. ':chat:' .. c .. ':messages:ai')
  redis.call('DEL', tag .. ':chat:' .. c .. ':summary')
  local idx = tag .. ':chat:' .. c .. ':embed_ids'
  for _, e in ipairs(redis.call('SMEMBERS', idx)) do
    local shared = false
    for _, k in ipairs(keep) do
      if redis.call('SISMEMBER', tag .. ':chat:' .. k .. ':embed_ids', e) == 1 then shared = true; break end
    end
    if not shared then redis.call('DEL', tag .. ':embed:' .. e) end
  end
  redis.call('DEL', idx)
  local sidx = tag .. ':chat:' .. c .. ':app_settings_memories_keys'
  for _, k in ipairs(redis.call('SMEMBERS', sidx)) do
    redis.call('DEL', tag .. ':chat:' .. c .. ':app_settings_memories:' .. k)
  end
  redis.call('DEL', sidx)
end

local function append_and_evict()
  local msgs, lru = KEYS[1], KEYS[2]
  local ttl, maxm, maxc = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
  local tag, chat = ARGV[6], ARGV[7]
  for i = 8, #ARGV do redis.call('RPUSH', msgs, ARGV[i]) end
  redis.call('LTRIM', msgs, -maxm, -1)
  redis.call('EXPIRE', msgs, ttl)
  redis.call('ZADD', lru, ARGV[5], chat)
  redis.call('EXPIRE', lru, ttl)
  local evicted = {}
  local n = redis.call('ZCARD', lru)
  if n > maxc then
    local old = redis.call('ZRANGE', lru, 0, n - maxc - 1)
    local keep = redis.call('ZRANGE', lru, n - maxc, -1)
    for _, c in ipairs(old) do
      drop_chat(tag, c, keep)
      redis.call('ZREM', lru, c)
      table.insert(evicted, c)
    end
  end
  return evicted
end
"#
    };
}

/// KEYS: messages, lru. ARGV: mode, ttl, max_messages, max_chats, score, user_tag, chat, entries...
pub(super) const AI_WRITE: &str = concat!(
    ai_lua!(),
    r#"
if ARGV[1] == 'replace' then redis.call('DEL', KEYS[1]) end
return append_and_evict()
"#
);

/// KEYS and ARGV as [`AI_WRITE`], mode `create` or `existing`. Returns the chat's list as it
/// was (false if absent), then appends like `AI_WRITE`; an absent chat is written only
/// in mode `create`.
pub(super) const AI_READ_APPEND: &str = concat!(
    ai_lua!(),
    r#"
local prior = redis.call('LRANGE', KEYS[1], 0, -1)
if #prior == 0 then
  -- Redis holds no empty lists: the chat is not cached.
  if ARGV[1] ~= 'create' then return false end
  prior = false
end
append_and_evict()
return prior
"#
);

/// KEYS: lru. ARGV: user_tag, chat. Removes one chat like an eviction.
pub(super) const AI_DELETE: &str = concat!(
    ai_lua!(),
    r#"
local lru, tag, c = KEYS[1], ARGV[1], ARGV[2]
redis.call('ZREM', lru, c)
drop_chat(tag, c, redis.call('ZRANGE', lru, 0, -1))
return 1
"#
);

/// KEYS: messages, lru. ARGV: ttl, score, chat. Reads a chat and refreshes TTL and recency.
pub(super) const AI_READ: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
redis.call('EXPIRE', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], 'XX', ARGV[2], ARGV[3])
return redis.call('LRANGE', KEYS[1], 0, -1)
"#;

/// KEYS: lru, the chat's summary. ARGV: user_tag, chat, others. Returns the chat's summary
/// (nil if none), then (chat, summary) of up to `others` other chats in the LRU that have
/// one, the most recently used first.
pub(super) const AI_SUMMARIES: &str = r#"
local out = {redis.call('GET', KEYS[2])}
local want, found = tonumber(ARGV[3]), 0
if want > 0 then
  for _, c in ipairs(redis.call('ZREVRANGE', KEYS[1], 0, -1)) do
    if c ~= ARGV[2] then
      local s = redis.call('GET', ARGV[1] .. ':chat:' .. c .. ':summary')
      if s then
        table.insert(out, c)
        table.insert(out, s)
        found = found + 1
        if found >= want then break end
      end
    end
  end
end
return out
"#;

/// KEYS: sync index. ARGV: user_tag.
pub(super) const SYNC_CLEAR: &str = r#"
for _, c in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  redis.call('DEL', ARGV[1] .. ':chat:' .. c .. ':messages:sync')
end
redis.call('DEL', KEYS[1])
return 1
"#;

/// KEYS[1] counter; ARGV[1] seed (-1: none); ARGV[2] TTL in ms. Adds one when the counter
/// exists, else sets it to seed + 1 when seeded; returns the value or nil.
pub const COUNTER_BUMP: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 1 then
  local n = redis.call('INCR', KEYS[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return n
end
local seed = tonumber(ARGV[1])
if seed < 0 then return nil end
redis.call('SET', KEYS[1], seed + 1, 'PX', ARGV[2])
return seed + 1
"#;

/// KEYS[1] pending hash, KEYS[2] its order (zset); ARGV: id, value, score, max, TTL ms.
/// Keeps the newest `max` pending answers of a user.
pub const PENDING_PUT: &str = r#"
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
while redis.call('ZCARD', KEYS[2]) > tonumber(ARGV[4]) do
  local oldest = redis.call('ZPOPMIN', KEYS[2])
  redis.call('HDEL', KEYS[1], oldest[1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return 1
"#;

/// KEYS: hash. ARGV: field, value, ttl ms, max fields. Sets the field unless set (emptying
/// a full hash first); returns what it holds; refreshes the TTL.
pub const FIELD_CLAIM: &str = r#"
local held = redis.call('HGET', KEYS[1], ARGV[1])
if not held then
  if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[4]) then redis.call('DEL', KEYS[1]) end
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  held = ARGV[2]
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return held
"#;
