"""A namespace and Pusher guest for tests/test_questions.py: its answers echo
what the request carried, and channels named after a failure (raise:,
async:, nonsense:, object:) fail in that way."""

import json

import weir_guest
from weir_guest import Verdict


class Handler(weir_guest.Handler):
    def on_subscribe(self, req):
        if req.channel.startswith("raise:"):
            raise RuntimeError("refusing to decide")
        if req.channel.startswith("async:"):
            async def later():
                return True
            return later()
        if req.channel.startswith("nonsense:"):
            return "yes"
        if req.channel.startswith("echo:"):
            name = (req.info or {}).get("name")
            return Verdict.refuse(4000 + len(f"{req.client}|{req.user}|{name}"))
        return True

    def on_client_publish(self, req):
        if req.channel.startswith("object:"):
            return {"t": 1}
        info = req.info.get("n") if isinstance(req.info, dict) else None
        data = req.data.get("n") if isinstance(req.data, dict) else None
        return json.dumps({"user": req.user, "info": info, "data": data, "text": req.text},
                          separators=(",", ":"))

    def on_pusher_connect(self, req):
        return Verdict.refuse(4001, f"{req.path} {req.query('protocol')} {req.header('origin')} "
                              f"{req.socket_id}")
