//! Generates the Dapr lock service's and redquorum's own messages and
//! gRPC services from
//! proto/ with the protoc that `protoc-bin-vendored` carries: building
//! needs no protoc installed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: a build script is single-threaded; nothing reads the
    // environment concurrently.
    unsafe { std::env::set_var("PROTOC", protoc) };
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Malformed protobuf is the caller's error (INVALID_ARGUMENT), not
        // the server's (prost's codec says INTERNAL).
        .codec_path("crate::grpc::codec::Codec")
        // The own API's messages are its HTTP/JSON bodies too.
        .type_attribute(
            ".redquorum.v1",
            "#[derive(serde::Serialize, serde::Deserialize)]",
        )
        .message_attribute(
            ".redquorum.v1",
            "#[serde(default, rename_all = \"camelCase\", deny_unknown_fields)]",
        )
        .enum_attribute(".redquorum.v1", "#[serde(rename_all = \"camelCase\")]")
        .compile_protos(
            &[
                "proto/dapr/proto/runtime/v1/lock.proto",
                "proto/redquorum/v1/locks.proto",
            ],
            &["proto"],
        )?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
