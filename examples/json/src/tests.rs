use super::Json;
use weir_guest::testing::TestRoute;

#[test]
fn answers_the_next_even_number_or_says_what_is_wrong() {
    let mut route = TestRoute::<Json>::new("/json");
    let c = route.connect("/json");
    for msg in [
        r#"{"number": 1}"#,
        r#"{"number": 4}"#,
        "[1]",
        r#"{"number": "x"}"#,
        "{",
    ] {
        route.send_text(c, msg);
    }
    let got = route.texts(c);
    assert_eq!(got[..2], [r#"{"number":2}"#, r#"{"number":6}"#]);
    assert_eq!(got[2], r#"{"error":"missing field \"number\""}"#);
    assert_eq!(got[3], r#"{"error":"\"number\" must be an integer"}"#);
    assert!(
        got[4].starts_with(r#"{"error":"malformed JSON"#),
        "{}",
        got[4]
    );
    assert!(route.is_open(c));
}

#[test]
fn overflow_is_an_error_not_a_wrap() {
    let mut route = TestRoute::<Json>::new("/json");
    let c = route.connect("/json");
    route.send_text(c, &format!(r#"{{"number": {}}}"#, i64::MAX));
    assert_eq!(route.texts(c), [r#"{"error":"\"number\" is too large"}"#]);
}
