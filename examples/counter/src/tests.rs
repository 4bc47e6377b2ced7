use super::Counter;
use weir_guest::testing::TestRoute;
use weir_guest::Request;

#[test]
fn counts_per_connection_and_the_count_survives_replacement() {
    let mut route = TestRoute::<Counter>::new("/counter");
    let a = route.connect("/counter");
    let b = route.connect("/counter?from=41");
    route.send_text(a, "x");
    route.send_binary(a, b"y");
    route.send_text(b, "x");
    route.replace_instance();
    route.send_text(a, "x");
    route.send_text(b, "x");
    assert_eq!(route.texts(a), ["1", "2", "3"]);
    assert_eq!(route.texts(b), ["42", "43"]);
}

#[test]
fn a_start_that_is_not_a_number_counts_from_zero() {
    let mut route = TestRoute::<Counter>::new("/counter");
    let a = route
        .upgrade(Request::new("/counter?from=lots"))
        .expect("accepted");
    route.send_text(a, "x");
    assert_eq!(route.texts(a), ["1"]);
}
