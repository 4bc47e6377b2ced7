use super::Echo;
use weir_guest::testing::{Received, TestRoute};

#[test]
fn echoes_text_and_binary_to_the_sender_only() {
    let mut route = TestRoute::<Echo>::new("/plain");
    let (a, b) = (route.connect("/plain"), route.connect("/plain"));
    route.send_text(a, "héllo");
    route.send_binary(a, &[0, 255]);
    assert_eq!(
        route.received(a),
        [
            Received::Text("héllo".into()),
            Received::Binary(vec![0, 255])
        ]
    );
    assert!(route.received(b).is_empty());
}
