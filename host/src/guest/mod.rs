//! WebAssembly guest routes (owner: guest helper).
