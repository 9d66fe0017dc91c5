//! prost's codec, but a message that does not decode, or is over the
//! request bound, is the caller's error (INVALID_ARGUMENT), as Dapr
//! answers bad input; prost's codec says INTERNAL.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};

use prost::Message;
use prost::bytes::Buf;
use tonic::Status;
use tonic::codec::{BufferSettings, DecodeBuf, Decoder};
use tonic_prost::{ProstCodec, ProstEncoder};

/// The largest message decoded (`Limits::max_request_bytes`), for every
/// service of the process: the generated code builds codecs with
/// `Default`, so the bound cannot travel with them.
static MAX_MESSAGE: AtomicUsize = AtomicUsize::new(16 * 1024);

pub(crate) fn set_max_message(bytes: usize) {
    MAX_MESSAGE.store(bytes, Ordering::Relaxed);
}

/// The codec the generated service uses.
#[derive(Debug)]
pub struct Codec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for Codec<T, U> {
    fn default() -> Self {
        Codec(PhantomData)
    }
}

impl<T, U> tonic::codec::Codec for Codec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = StrictDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        StrictDecoder(PhantomData)
    }
}

/// Decodes a `U`, or answers INVALID_ARGUMENT.
#[derive(Debug)]
pub struct StrictDecoder<U>(PhantomData<U>);

impl<U: Message + Default> Decoder for StrictDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        let max = MAX_MESSAGE.load(Ordering::Relaxed);
        if buf.remaining() > max {
            return Err(Status::invalid_argument(format!(
                "malformed request: the message is over {max} bytes"
            )));
        }
        U::decode(buf)
            .map(Some)
            .map_err(|e| Status::invalid_argument(format!("malformed request: {e}")))
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}
