//! A [`TestRoute`]'s handler as a real-time namespace's guest: the
//! subscribe and publish questions the gateway asks it, and the verdicts
//! it answers with.

use super::*;

impl<H: Handler> TestRoute<H> {
    /// Asks the handler, as a real-time namespace's guest, whether a client
    /// may subscribe ([`Handler::on_subscribe`]); the decision as the
    /// gateway reads it from the answer.
    ///
    /// # Panics
    /// If the handler answered with anything but one verdict for the call.
    pub fn subscribe(&mut self, req: &SubscribeRequest<'_>) -> SubDecision {
        match self.ask(
            EventKind::RtSubscribe,
            req.channel,
            req.client,
            req.user,
            req.info,
            b"",
        ) {
            RtAnswer::Subscribe(_, 0, _, _) => SubDecision::Allow,
            RtAnswer::Subscribe(_, code, _, _) => SubDecision::Refuse(code),
            other => panic!("a subscribe was answered with {other:?}"),
        }
    }

    /// Asks the handler, as a Pusher app's guest, about a connection
    /// ([`Handler::on_pusher_connect`]); the decision as the gateway reads
    /// it from the answer.
    pub fn pusher_connect(&mut self, req: &ConnectRequest<'_>) -> ConnectDecision {
        let kind = EventKind::PusherConnect;
        match self.ask(
            kind,
            req.target,
            req.socket_id,
            "",
            req.headers.as_bytes(),
            b"",
        ) {
            RtAnswer::Subscribe(_, 0, _, _) => ConnectDecision::Allow,
            RtAnswer::Subscribe(_, code, _, message) => ConnectDecision::Refuse(code, message),
            other => panic!("a connect was answered with {other:?}"),
        }
    }

    /// Asks the handler, as a Pusher app's guest, about a subscribe
    /// ([`Handler::on_pusher_subscribe`]).
    pub fn pusher_subscribe(&mut self, req: &ChannelRequest<'_>) -> ChannelDecision {
        let mut rest = Vec::new();
        weir_abi::pusher::encode_subscribe_rest(&mut rest, req.signature, req.auth);
        let info = req.channel_data.as_bytes();
        let kind = EventKind::PusherSubscribe;
        match self.ask(kind, req.channel, req.socket_id, req.user, info, &rest) {
            RtAnswer::Subscribe(_, 0, false, _) => ChannelDecision::Allow,
            RtAnswer::Subscribe(_, 0, true, data) => {
                ChannelDecision::Authorise((!data.is_empty()).then_some(data))
            }
            RtAnswer::Subscribe(_, code, _, message) => ChannelDecision::Refuse(code, message),
            other => panic!("a subscribe was answered with {other:?}"),
        }
    }

    /// Gives the handler, as a Pusher app's guest, a client event
    /// ([`Handler::on_pusher_client_event`]).
    pub fn pusher_client_event(&mut self, req: &ClientEventRequest<'_>) -> PubDecision {
        let (kind, event) = (EventKind::PusherClientEvent, req.event.as_bytes());
        match self.ask(kind, req.channel, req.socket_id, req.user, event, req.data) {
            RtAnswer::Publish(_, d) => d,
            other => panic!("a client event was answered with {other:?}"),
        }
    }

    /// Gives the handler, as a real-time namespace's guest, a client's
    /// publication ([`Handler::on_client_publish`]); the decision as the
    /// gateway reads it from the answer.
    pub fn client_publish(&mut self, req: &PublishRequest<'_>) -> PubDecision {
        match self.ask(
            EventKind::RtPublish,
            req.channel,
            req.client,
            req.user,
            req.info,
            req.data,
        ) {
            RtAnswer::Publish(_, d) => d,
            other => panic!("a publish was answered with {other:?}"),
        }
    }

    /// One real-time question in a batch of its own; its one answer.
    fn ask(
        &mut self,
        kind: EventKind,
        channel: &str,
        client: &str,
        user: &str,
        info: &[u8],
        data: &[u8],
    ) -> RtAnswer {
        const CALL: u64 = 0x5eed;
        let mut bytes = Vec::new();
        let req = weir_abi::RtRequest {
            call: CALL,
            channel,
            client,
            user,
            info,
        };
        weir_abi::encode_rt_request(&mut bytes, &req, data);
        self.rt_verdicts.clear();
        self.run_one(RT_CONN, kind, 0, 0, &bytes);
        let answers = std::mem::take(&mut self.rt_verdicts);
        assert_eq!(answers.len(), 1, "one verdict per question: {answers:?}");
        let answer = answers.into_iter().next().expect("one");
        let call = match &answer {
            RtAnswer::Subscribe(call, ..) | RtAnswer::Publish(call, _) => *call,
        };
        assert_eq!(call, CALL, "the verdict names the question's call");
        answer
    }
}
