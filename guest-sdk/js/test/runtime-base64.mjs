// runtime.mjs again with Uint8Array.prototype.toBase64 present, as it is in
// the guest (quickjs-ng) but not in node 20: the runtime then decodes each
// batch through one byte string (src/abi.js byteString), the path the
// components take. Run: node guest-sdk/js/test/runtime-base64.mjs

if (typeof Uint8Array.prototype.toBase64 !== "function") {
  Object.defineProperty(Uint8Array.prototype, "toBase64", {
    value() {
      return Buffer.from(this.buffer, this.byteOffset, this.byteLength).toString("base64");
    },
  });
}
const abi = await import("../src/abi.js");
if (abi.byteString(new Uint8Array([104, 105])) !== "hi") throw new Error("byte strings are not in use");
await import("./runtime.mjs");
