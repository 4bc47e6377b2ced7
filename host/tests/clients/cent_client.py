"""Calls every server API method weir serves with Centrifugo's Python
client `cent` (pinned in requirements.txt), for host/tests/centrifugo.rs.

Usage: cent_client.py <api url> <key> <channel>

A `centrifuge` client is subscribed to <channel> (user "listener") while
this runs, and receives the three publications made here. Exits non-zero
on the first failed check; the last stdout line is a JSON summary.
"""

import base64
import json
import sys

from cent import (
    BatchRequest,
    BroadcastRequest,
    CentApiResponseError,
    CentTransportError,
    CentUnauthorizedError,
    ChannelsRequest,
    Client,
    DisconnectRequest,
    HistoryRemoveRequest,
    HistoryRequest,
    InfoRequest,
    PresenceRequest,
    PresenceStatsRequest,
    PublishRequest,
    StreamPosition,
)

api_url, key, channel = sys.argv[1:4]
api = Client(api_url, key, timeout=10)

first = api.publish(PublishRequest(channel=channel, data={"n": 1}, idempotency_key="k1"))
assert first.offset >= 1 and first.epoch, first
again = api.publish(PublishRequest(channel=channel, data={"n": 1}, idempotency_key="k1"))
assert (again.offset, again.epoch) == (first.offset, first.epoch), "idempotent"

b64 = base64.b64encode(json.dumps({"n": 2}).encode()).decode()
second = api.publish(PublishRequest(channel=channel, data=None, b64data=b64))
assert second.offset == first.offset + 1, (first, second)

broadcast = api.broadcast(
    BroadcastRequest(channels=[channel, "chat:elsewhere"], data={"n": 3})
)
assert len(broadcast.responses) == 2
assert all(r.error is None and r.result.offset >= 1 for r in broadcast.responses), broadcast

presence = api.presence(PresenceRequest(channel=channel))
users = sorted(info.user for info in presence.presence.values())
assert users == ["listener"], users
stats = api.presence_stats(PresenceStatsRequest(channel=channel))
assert (stats.num_clients, stats.num_users) == (1, 1), stats

history = api.history(HistoryRequest(channel=channel, limit=-1))
assert [p.data["n"] for p in history.publications] == [1, 2, 3], history
assert history.offset == first.offset + 2 and history.epoch == first.epoch
since = api.history(
    HistoryRequest(
        channel=channel,
        limit=10,
        since=StreamPosition(offset=first.offset, epoch=first.epoch),
        reverse=True,
    )
)
assert [p.data["n"] for p in since.publications] == [3, 2], since
top_only = api.history(HistoryRequest(channel=channel))
assert top_only.publications == [] and top_only.offset == history.offset

channels = api.channels(ChannelsRequest())
assert channels.channels[channel].num_clients == 1, channels

info = api.info(InfoRequest())
assert info.nodes[0].num_clients >= 1, info

api.history_remove(HistoryRemoveRequest(channel=channel))
removed = api.history(HistoryRequest(channel=channel, limit=-1))
assert removed.publications == [] and removed.offset == history.offset, removed

api.disconnect(DisconnectRequest(user="nobody-here"))

# batch: publishes in order, one reply each, at the top level (not in
# "result"), as cent reads it.
batched = api.batch(
    BatchRequest(
        requests=[PublishRequest(channel="chat:batch", data={"n": n}) for n in range(3)]
        + [HistoryRequest(channel="chat:batch", limit=-1)]
    )
)
offsets = [r.offset for r in batched.replies[:3]]
assert offsets == [offsets[0], offsets[0] + 1, offsets[0] + 2], batched
assert [p.data["n"] for p in batched.replies[3].publications][-3:] == [0, 1, 2], batched

refusals = {}
try:
    api.publish(PublishRequest(channel="nowhere:x", data={}))
    raise AssertionError("an unknown namespace was accepted")
except CentApiResponseError as e:
    refusals["unknown_namespace"] = e.code
try:
    api.presence(PresenceRequest(channel="tiny:x"))
    raise AssertionError("presence of a namespace without presence")
except CentApiResponseError as e:
    refusals["no_presence"] = e.code
try:
    Client(api_url, "not-the-key", timeout=10).info(InfoRequest())
    raise AssertionError("a wrong key was accepted")
except CentUnauthorizedError:
    refusals["wrong_key"] = 401
try:
    api.publish(PublishRequest(channel=channel, data={"big": "x" * (2 << 20)}))
    raise AssertionError("an oversized publication was accepted")
except CentTransportError as e:
    refusals["oversized"] = e.status_code

print(json.dumps({"offset": history.offset, "batch": offsets, "refusals": refusals}))
