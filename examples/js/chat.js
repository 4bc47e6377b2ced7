// Chat rooms on a route `/chat/{room}`: a connection joins the room its path
// names (the topic is the room's name; topics belong to the route), and
// every message it sends reaches every *other* member of the room, text as
// text, binary as binary (examples/chat in Rust).

export default {
  onOpen(conn) {
    conn.subscribe(conn.param("room") ?? "lobby");
  },
  onMessage(conn, msg) {
    conn.publish(conn.param("room") ?? "lobby", msg);
  },
};
