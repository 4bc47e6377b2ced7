use super::Chat;
use weir_guest::testing::{Received, TestRoute};

#[test]
fn a_message_reaches_the_other_members_of_its_room_only() {
    let mut route = TestRoute::<Chat>::new("/chat/{room}");
    let ann = route.connect("/chat/lobby");
    let bob = route.connect("/chat/lobby?nick=bob");
    let eve = route.connect("/chat/rust");
    assert_eq!(route.topics(bob), ["lobby"]);
    route.send_text(ann, "hi lobby");
    route.send_binary(bob, &[1, 2]);
    assert_eq!(route.received(ann), [Received::Binary(vec![1, 2])]);
    assert_eq!(route.texts(bob), ["hi lobby"]);
    assert!(route.received(eve).is_empty());
}

#[test]
fn the_room_survives_instance_replacement() {
    let mut route = TestRoute::<Chat>::new("/chat/{room}");
    let ann = route.connect("/chat/a");
    let bob = route.connect("/chat/a");
    route.replace_instance();
    route.send_text(ann, "still here");
    assert_eq!(route.texts(bob), ["still here"]);
}

#[test]
fn a_member_who_left_gets_nothing() {
    let mut route = TestRoute::<Chat>::new("/chat/{room}");
    let ann = route.connect("/chat/a");
    let bob = route.connect("/chat/a");
    route.close(bob, 1000, "bye");
    route.send_text(ann, "anyone?");
    assert!(!route.is_open(bob));
    assert!(route.received(ann).is_empty());
}
