use super::*;

#[test]
fn probe() {
    for text in [
        "[server]\nmax_message = 32MiB\n",
        "listen = 3\n",
        "[[route]]\n\npath = \"/a\"\nnative = \"echo\"\n\n# c\n[[route]] # x\n\n\npath = \"/b\"\nnative = \"echo\"\n[[route]]\npath = \"/c\"\nnative = \"echo\"\n",
        "[[route]]\npath = \"/a\"\nnative = \"echo\"\nenv.X = \"1\"\n",
        "[[route]]\npath = \"/a\"\nguest = \"a.wasm\"\n[route.env]\nX = 1\n",
        "[[route]]\npath = \"/a\"\nguest = \"a.wasm\"\n[route.env]\nX = \"1\"\n[[route]]\npath = \"/a\"\nguest = \"a.wasm\"\n",
        "[[route]]\npath = \"/a/{x}\"\nguest = \"a.wasm\"\n[[route]]\npath = \"/a/{y}\"\nguest = \"a.wasm\"\n",
        "[[route]]\npath = \"/a/*\"\nguest = \"a.wasm\"\n[[route]]\npath = \"/a/{*y}\"\nguest = \"a.wasm\"\n",
        "[server]\nlisten = \n",
        "[server\n",
    ] {
        println!("----\n{text}=> {:?}", Config::parse(text, Path::new("/x")).map(|c| c.routes.iter().map(|r| r.line).collect::<Vec<_>>()));
    }
}
