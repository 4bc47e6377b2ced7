"""JSON counter: {"number": n} gets back {"number": n + 1} when n is odd and
{"number": n + 2} when n is even, so the answer is always the next even
number after n. Anything else (not JSON, not an object, no integer
"number", outside i64 as in the Rust example) gets
{"error": "<what was wrong>"} and the connection stays open."""

import json

import weir_guest

I64_MAX = 2**63 - 1
I64_MIN = -(2**63)


def answer(raw):
    """The next even number after the request's, or {"error": ...}."""
    try:
        value = json.loads(raw)
    except ValueError as e:
        return {"error": f"malformed JSON: {e}"}
    if not isinstance(value, dict):
        return {"error": 'expected an object with an integer "number"'}
    if "number" not in value:
        return {"error": 'missing field "number"'}
    n = value["number"]
    if not isinstance(n, int) or isinstance(n, bool):
        return {"error": '"number" must be an integer'}
    nxt = n + (2 if n % 2 == 0 else 1)
    if not I64_MIN <= n <= I64_MAX or nxt > I64_MAX:
        return {"error": '"number" is too large'}
    return nxt


class Handler(weir_guest.Handler):
    def on_message(self, conn, msg):
        reply = answer(msg)
        if isinstance(reply, int):
            # The common answer, formatted directly (as the Rust example does).
            conn.send_text(f'{{"number":{reply}}}')
        else:
            conn.send_text(json.dumps(reply))
