use super::Auth;
use weir_guest::testing::TestRoute;
use weir_guest::Request;

/// The token comes from the route's environment; tests set it once (all of
/// them expect the same value).
fn route() -> TestRoute<Auth> {
    std::env::set_var("WEIR_AUTH_TOKEN", "let-me-in");
    TestRoute::new("/auth")
}

#[test]
fn the_token_is_taken_from_query_bearer_or_header() {
    let mut route = route();
    for req in [
        Request::new("/auth?token=let-me-in"),
        Request::new("/auth").with_header("Authorization", "Bearer let-me-in"),
        Request::new("/auth").with_header("x-weir-token", "let-me-in"),
    ] {
        let c = route.upgrade(req).expect("accepted");
        route.send_text(c, "hi");
        assert_eq!(route.texts(c), ["hi"]);
    }
}

#[test]
fn a_missing_or_wrong_token_gets_401() {
    let mut route = route();
    assert_eq!(route.upgrade(Request::new("/auth")), Err(401));
    assert_eq!(route.upgrade(Request::new("/auth?token=let-me")), Err(401));
    let wrong = Request::new("/auth").with_header("authorization", "Bearer nope");
    assert_eq!(route.upgrade(wrong), Err(401));
}
