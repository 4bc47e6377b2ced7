use super::Binary;
use weir_guest::testing::{Received, TestRoute};

#[test]
fn four_bytes_get_the_next_even_number_back() {
    let mut route = TestRoute::<Binary>::new("/binary");
    let c = route.connect("/binary");
    route.send_binary(c, &7i32.to_le_bytes());
    route.send_binary(c, &(-2i32).to_le_bytes());
    route.send_binary(c, &i32::MAX.to_le_bytes());
    let want: Vec<_> = [8i32, 0, i32::MIN]
        .iter()
        .map(|n| Received::Binary(n.to_le_bytes().to_vec()))
        .collect();
    assert_eq!(route.received(c), want);
}

#[test]
fn anything_else_closes_with_1003() {
    let mut route = TestRoute::<Binary>::new("/binary");
    let short = route.connect("/binary");
    route.send_binary(short, &[1, 2, 3]);
    assert_eq!(
        route.closed_with(short),
        Some((1003, "expected exactly 4 bytes"))
    );
    let text = route.connect("/binary");
    route.send_text(text, "1234");
    assert_eq!(
        route.closed_with(text),
        Some((1003, "expected a binary message"))
    );
    assert!(!route.is_open(text));
}
