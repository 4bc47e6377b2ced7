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
            RtAnswer::Subscribe(_, d) => d,
            other => panic!("a subscribe was answered with {other:?}"),
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
            RtAnswer::Subscribe(call, _) | RtAnswer::Publish(call, _) => *call,
        };
        assert_eq!(call, CALL, "the verdict names the question's call");
        answer
    }
}
