// C++ uWebSockets peer (benches/peers/build-uws-cpp.sh builds it): the
// yardstick for weir's own CPU per message, uWebSockets with no runtime
// around it. Same behaviour and limits as js/uws-server.js: /echo replies
// with each message, /relay forwards to the paired connection (a pair is two
// consecutive connections) and ends the partner with 1001 when one side
// leaves. Compression off, 64 MiB max payload and backpressure limit,
// IDLE_TIMEOUT seconds (0 = off, the default; >= 8 otherwise).
//
// Usage: uws-cpp PORT [THREADS]. THREADS > 1 runs one event loop per thread
// on the same port (SO_REUSEPORT, the kernel spreads connections); relay
// pairs are formed within a thread, so use one thread for /relay.
#include "App.h"

#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Conn {
    // The paired connection (relay only), or null.
    uWS::WebSocket<false, true, Conn> *partner = nullptr;
    bool closed = false;
};

using Ws = uWS::WebSocket<false, true, Conn>;

// The relay connection waiting for its partner, per event loop.
thread_local Ws *waiting = nullptr;

void serve(int port, unsigned short idle) {
    uWS::App app;
    app.ws<Conn>("/echo", {
        .compression = uWS::DISABLED,
        .maxPayloadLength = 64u << 20,
        .idleTimeout = idle,
        .maxBackpressure = 64u << 20,
        .sendPingsAutomatically = true,
        .message = [](Ws *ws, std::string_view msg, uWS::OpCode op) { ws->send(msg, op); },
    });
    app.ws<Conn>("/relay", {
        .compression = uWS::DISABLED,
        .maxPayloadLength = 64u << 20,
        .idleTimeout = idle,
        .maxBackpressure = 64u << 20,
        .sendPingsAutomatically = true,
        .open = [](Ws *ws) {
            if (waiting && !waiting->getUserData()->closed) {
                ws->getUserData()->partner = waiting;
                waiting->getUserData()->partner = ws;
                waiting = nullptr;
            } else {
                waiting = ws;
            }
        },
        .message = [](Ws *ws, std::string_view msg, uWS::OpCode op) {
            if (Ws *p = ws->getUserData()->partner) p->send(msg, op);
        },
        .close = [](Ws *ws, int, std::string_view) {
            Conn *me = ws->getUserData();
            me->closed = true;
            if (waiting == ws) waiting = nullptr;
            if (Ws *p = me->partner) {
                me->partner = nullptr;
                if (!p->getUserData()->closed) {
                    p->getUserData()->partner = nullptr;
                    p->end(1001);
                }
            }
        },
    });
    app.any("/*", [](auto *res, auto *) { res->writeStatus("404 Not Found")->end(); });
    app.listen("127.0.0.1", port, [port](auto *token) {
        if (!token) {
            std::cerr << "uws-cpp: cannot listen on " << port << std::endl;
            std::exit(1);
        }
    });
    app.run();
}

}  // namespace

int main(int argc, char **argv) {
    int port = argc > 1 ? std::atoi(argv[1]) : 9001;
    int threads = argc > 2 ? std::atoi(argv[2]) : 1;
    const char *idle_env = std::getenv("IDLE_TIMEOUT");
    auto idle = static_cast<unsigned short>(idle_env ? std::atoi(idle_env) : 0);
    std::cout << "C++ uWebSockets peer listening on 127.0.0.1:" << port << " (" << threads
              << " thread" << (threads == 1 ? "" : "s") << ")" << std::endl;
    std::vector<std::thread> rest;
    for (int i = 1; i < threads; i++) rest.emplace_back(serve, port, idle);
    serve(port, idle);
    for (auto &t : rest) t.join();
}
