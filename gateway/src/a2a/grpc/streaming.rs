//! The streamed methods (`SendStreamingMessage`, `SubscribeToTask`) as gRPC server streams: the
//! same A2A events the SSE bindings write, one `StreamResponse` message each. The service's
//! stream is already bounded (gateway shutdown, `--max-stream-ms`), so the gRPC stream ends
//! with an OK status where the SSE body would close, and a client resubscribes as it would
//! there.

use a2a_pb::pbconv::to_proto_stream_response;
use futures::StreamExt;
use futures::stream::BoxStream;
use tonic::Status;

/// A gRPC server stream of A2A events.
pub type Events = BoxStream<'static, Result<a2a_pb::StreamResponse, Status>>;

/// `events` as protobuf messages.
pub fn events(events: BoxStream<'static, a2a::StreamResponse>) -> Events {
    events
        .map(|event| Ok(to_proto_stream_response(&event)))
        .boxed()
}
