"""Handler for tests/test_filter_reads.py: a filter's bad verdicts and the
bound on pending reads."""

import weir_guest
from weir_guest import MAX_PENDING_READS, Verdict


class Handler(weir_guest.Handler):
    def on_proxy_message(self, conn, direction, msg):
        if msg == "raise":
            raise ValueError("filter broke")
        if msg == "number":
            return 42
        if msg == "async":
            async def later():
                return Verdict.PASS
            return later()
        if msg == "swap":
            return Verdict.replace("swapped")
        if msg == "bytes":
            return b"\x01\x02\x03"
        return None

    def on_message(self, conn, msg):
        if msg == "one more":
            conn.history("chat:room")
            return
        busy = []

        def done(f):
            e = f.exception()
            if e is not None:
                busy.append(e.reason)
                conn.send_text(f"{e.reason} {len(busy)}")
        for _ in range(MAX_PENDING_READS + 1):
            conn.history("chat:room", 1).add_done_callback(done)
        conn.presence("").add_done_callback(done)
