// A namespace and Pusher guest for guest-sdk/js/test/questions.test.mjs:
// its answers echo what the request carried, and channels named after a
// failure (throw:, async:, nonsense:, object:) fail in that way.

import { Verdict } from "weir-guest";

export default {
  onSubscribe(req) {
    if (req.channel.startsWith("throw:")) throw new Error("refusing to decide");
    if (req.channel.startsWith("async:")) return (async () => true)();
    if (req.channel.startsWith("nonsense:")) return "yes";
    if (req.channel.startsWith("echo:")) {
      return Verdict.refuse(4000 + `${req.client}|${req.user}|${req.info?.name}`.length);
    }
    return true;
  },
  onClientPublish(req) {
    if (req.channel.startsWith("object:")) return { t: 1 };
    return JSON.stringify({ user: req.user, info: req.info?.n ?? null, data: req.data?.n, text: req.text });
  },
  onPusherConnect(req) {
    return Verdict.refuse(4001, `${req.path} ${req.query("protocol")} ${req.header("origin")} ${req.socketId}`);
  },
};
