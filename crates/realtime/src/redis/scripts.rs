//! The Lua scripts the store runs, each one atomic on the shard that holds
//! its channel (the keys share the channel's hash tag): publish (offset,
//! history, message), read (top, epoch, entries), presence add, get and
//! remove (add and remove tell the nodes that watch the channel).

pub(super) const PUBLISH: &str = r#"
local size = tonumber(ARGV[3])
if ARGV[8] == '1' then
  local prev = redis.call('get', KEYS[3])
  if prev then
    return {tonumber(prev), redis.call('hget', KEYS[1], 'e') or ''}
  end
end
local offset = 0
local epoch = ''
if size > 0 then
  epoch = redis.call('hget', KEYS[1], 'e')
  if not epoch then
    epoch = ARGV[5]
    redis.call('hset', KEYS[1], 'e', epoch)
  end
  offset = redis.call('hincrby', KEYS[1], 's', 1)
  redis.call('expire', KEYS[1], ARGV[4])
  redis.call('xadd', KEYS[2], 'MAXLEN', size, offset .. '-0', 'd', ARGV[1], 'i', ARGV[2])
  redis.call('expire', KEYS[2], ARGV[4])
end
redis.call(ARGV[7], ARGV[6], 'p' .. offset .. ';' .. epoch .. ';' .. string.len(ARGV[2]) .. ';' .. ARGV[2] .. ARGV[1])
if ARGV[8] == '1' then
  redis.call('set', KEYS[3], offset, 'EX', ARGV[9])
end
return {offset, epoch}
"#;

/// The channel's position (made, with a new epoch, if it has none) and
/// its stream: after ARGV[1] when it is 0 or more, nothing when it is -2,
/// else from the start (or the end, ARGV[3] = '1'), at most ARGV[2] entries.
pub(super) const READ: &str = r#"
local epoch = redis.call('hget', KEYS[1], 'e')
if not epoch then
  epoch = ARGV[4]
  redis.call('hset', KEYS[1], 'e', epoch)
  redis.call('expire', KEYS[1], ARGV[5])
end
local top = tonumber(redis.call('hget', KEYS[1], 's') or '0')
local since = tonumber(ARGV[1])
local entries = {}
if since >= 0 then
  entries = redis.call('xrange', KEYS[2], (since + 1) .. '-0', '+', 'COUNT', ARGV[2])
elseif since == -2 then
  entries = {}
elseif ARGV[3] == '1' then
  entries = redis.call('xrevrange', KEYS[2], '+', '-', 'COUNT', ARGV[2])
else
  entries = redis.call('xrange', KEYS[2], '-', '+', 'COUNT', ARGV[2])
end
return {top, epoch, entries}
"#;

/// Drops expired members, then adds or refreshes ARGV[7..] (client, info
/// pairs) unless a new one would pass ARGV[3] members (0: no cap), and
/// tells every node watching the channel (`a` and the infos, with ARGV[5]
/// into ARGV[6]) so their copies follow. Answers 1, or 0 when full.
pub(super) const PRESENCE_ADD: &str = r#"
local gone = redis.call('zrangebyscore', KEYS[2], '-inf', ARGV[1])
for _, c in ipairs(gone) do redis.call('hdel', KEYS[1], c) end
redis.call('zremrangebyscore', KEYS[2], '-inf', ARGV[1])
local max = tonumber(ARGV[3])
local infos = {'a'}
for i = 7, #ARGV, 2 do
  if max > 0 and redis.call('hexists', KEYS[1], ARGV[i]) == 0 and redis.call('hlen', KEYS[1]) >= max then
    return 0
  end
  redis.call('hset', KEYS[1], ARGV[i], ARGV[i + 1])
  redis.call('zadd', KEYS[2], ARGV[2], ARGV[i])
  infos[#infos + 1] = ARGV[i + 1]
end
redis.call('expire', KEYS[1], ARGV[4])
redis.call('expire', KEYS[2], ARGV[4])
redis.call(ARGV[5], ARGV[6], table.concat(infos))
return 1
"#;

/// Members not expired: a flat list of client, info, expiry (unix seconds).
pub(super) const PRESENCE_GET: &str = r#"
local live = redis.call('zrangebyscore', KEYS[2], '(' .. ARGV[1], '+inf', 'WITHSCORES')
local out = {}
for i = 1, #live, 2 do
  local info = redis.call('hget', KEYS[1], live[i])
  if info then
    out[#out + 1] = live[i]
    out[#out + 1] = info
    out[#out + 1] = live[i + 1]
  end
end
return out
"#;

/// Removes client ARGV[1] and tells every node watching the channel (`r`
/// and the client id, with ARGV[2] into ARGV[3]).
pub(super) const PRESENCE_REMOVE: &str = r#"
redis.call('hdel', KEYS[1], ARGV[1])
redis.call('zrem', KEYS[2], ARGV[1])
redis.call(ARGV[2], ARGV[3], 'r' .. ARGV[1])
return 1
"#;
