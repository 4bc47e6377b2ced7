//! A pusher connection's own messages beyond subscriptions: `pusher:signin`
//! (the user's connections then take the core's user commands, so
//! `terminate_connections` reaches them on every node) and client events
//! (checked, rate-limited per connection, asked of the app's guest if it
//! has one, relayed to the channel's other subscribers and its webhook).

use super::*;

impl Pusher {
    pub(super) fn signin(&mut self, auth_value: &str, user_data: &str) {
        let app = self.app();
        if !app.config.user_authentication {
            return self.error(
                "user authentication is not enabled for this app",
                codes::UNAUTHORIZED,
            );
        }
        let checked = auth::verify_user(&app.key(), self.socket_id.as_str(), user_data, auth_value)
            .and_then(|()| SigninUser::parse(user_data));
        let user = match checked {
            Ok(user) => user,
            Err(e) => return self.error(&e.to_string(), e.code()),
        };
        if let Some(old) = self.user.take() {
            self.forget_user(&old);
        }
        let route = self.route();
        route.realtime.clients.add(
            &route.user_key(self.app, &user.id),
            self.socket_id.as_str(),
            self.id,
            self.outbound(),
            &route.inbox,
        );
        self.user = Some(user.id);
        self.send(&server::signin_success(user_data));
        if user.watchlist_truncated {
            self.error(
                "the watchlist holds more users than the limit",
                codes::WATCHLIST_LIMIT_EXCEEDED,
            );
        }
    }

    pub(super) fn forget_user(&self, user: &str) {
        let route = self.route();
        route
            .realtime
            .clients
            .remove(&route.user_key(self.app, user), self.id);
    }

    pub(super) fn client_event(&mut self, event: ClientEvent) {
        let config = &self.app().config;
        let (enabled, per_second) = (config.client_events, config.client_events_per_second);
        if !enabled {
            return self.error(
                "client events are not enabled for this app",
                codes::CLIENT_EVENT_REJECTED,
            );
        }
        let Some(sub) = self.subs.get(event.channel.name()) else {
            return self.error(
                "client events need a subscription to the channel",
                codes::CLIENT_EVENT_REJECTED,
            );
        };
        let now = Instant::now();
        let (start, count) = &mut self.events_window;
        if now.duration_since(*start) >= Duration::from_secs(1) {
            *start = now;
            *count = 0;
        }
        if *count >= per_second {
            return self.error(
                "client event rate limit exceeded (client_events_per_second)",
                codes::CLIENT_EVENT_REJECTED,
            );
        }
        *count += 1;
        if let Some(hook) = self.hook.clone() {
            let user = match sub.channel.is_presence() {
                true => sub.member.user.clone(),
                false => self.user.clone().unwrap_or_default(),
            };
            return self.ask_client_event(&hook, event, &user);
        }
        self.relay_event(event.channel.name(), &event.event, &event.data);
    }

    /// Sends a client event to the channel's other subscribers.
    pub(super) fn relay_event(&self, channel: &str, event: &str, data: &RawValue) {
        let Some(sub) = self.subs.get(channel) else {
            return;
        };
        let user_id = sub
            .channel
            .is_presence()
            .then_some(sub.member.user.as_str());
        let json = server::client_event(event, channel, data, user_id);
        let frame = Bytes::from(encode::frame(OpCode::Text, json.as_bytes()));
        // Never echoed to the sender; not kept by cache channels (the
        // core's delivery could not skip the sender).
        let route = self.route();
        route.topics.publish(&sub.core, &frame, Some(self.id));
        let app = self.app();
        route.count_fanout(app, &sub.core, true);
        app.counters.client_events.fetch_add(1, Ordering::Relaxed);
        if app.webhooks.wants(WebhookKind::ClientEvent) {
            app.webhooks.push(&WebhookEvent::ClientEvent {
                channel,
                event,
                data: &weir_pusher::client::data_string(data),
                socket_id: self.socket_id.as_str(),
                user_id,
            });
        }
    }
}
