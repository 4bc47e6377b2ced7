"""One server API call with Centrifugo's Python client `cent` (pinned in
requirements.txt), for scenarios of centrifuge-client.mjs.

Usage: cent_call.py <api url> <key> <method> <params as JSON>

Prints the result as JSON, or {"error": <code>} when the API answers an
error; exits non-zero on a transport failure.
"""

import json
import sys

import cent

api_url, key, method, params = sys.argv[1:5]
REQUESTS = {
    "subscribe": cent.SubscribeRequest,
    "unsubscribe": cent.UnsubscribeRequest,
    "disconnect": cent.DisconnectRequest,
    "publish": cent.PublishRequest,
}
api = cent.Client(api_url, key, timeout=10)
try:
    result = getattr(api, method)(REQUESTS[method](**json.loads(params)))
    print(json.dumps(result.model_dump(exclude_none=True) if result is not None else {}))
except cent.CentApiResponseError as e:
    print(json.dumps({"error": e.code}))
