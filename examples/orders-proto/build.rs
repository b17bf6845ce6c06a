//! Generates the `orders.v1.Orders` service stubs with tonic-build's manual
//! builder: the messages are written by hand in `src/lib.rs` (prost derive),
//! so the build needs no `protoc` and no proto parser.

use tonic_build::manual::{Builder, Method, Service};

fn main() {
    let unary = |name: &str, route: &str, input: &str, output: &str| {
        Method::builder()
            .name(name)
            .route_name(route)
            .input_type(input)
            .output_type(output)
            .codec_path("tonic_prost::ProstCodec")
            .build()
    };
    let orders = Service::builder()
        .name("Orders")
        .package("orders.v1")
        .comment("Pays orders; a payment runs under the lock of its order.")
        .method(unary("pay", "Pay", "crate::PayRequest", "crate::PayReply"))
        .method(unary(
            "status",
            "Status",
            "crate::StatusRequest",
            "crate::StatusReply",
        ))
        .build();
    Builder::new().compile(&[orders]);
    println!("cargo:rerun-if-changed=build.rs");
}
