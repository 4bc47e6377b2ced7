use super::Shout;
use weir_guest::testing::TestRoute;

#[test]
fn shouts_reach_the_room_with_the_name_and_count_is_private() {
    let mut route = TestRoute::<Shout>::new("/shout/{room}");
    let ann = route.connect("/shout/a?name=ann");
    let anon = route.connect("/shout/a");
    let other = route.connect("/shout/b?name=bob");
    route.send_text(ann, "hi there");
    route.send_text(anon, "yo");
    let both = ["ann: HI THERE".to_string(), format!("{anon}: YO")];
    assert_eq!(route.texts(ann), both);
    assert_eq!(route.texts(anon), both);
    assert!(route.texts(other).is_empty());
    route.replace_instance();
    route.send_text(ann, "!count");
    assert_eq!(route.texts(ann), ["1"]);
    assert!(route.texts(anon).is_empty());
}

#[test]
fn binary_closes_with_1003() {
    let mut route = TestRoute::<Shout>::new("/shout/{room}");
    let c = route.connect("/shout/a");
    route.send_binary(c, b"x");
    assert_eq!(route.closed_with(c), Some((1003, "text only")));
}
