use aws_sdk_s3::operation::get_object::GetObjectError;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use resilience::{circuit_breaker, retry};

// The SDK client retries each request by itself (3 attempts in its
// standard mode): `#[retry]` around it would be a second loop.
#[retry]
async fn get_avatar(
    s3: &aws_sdk_s3::Client,
    key: &str,
) -> Result<usize, SdkError<GetObjectError, HttpResponse>> {
    let object = s3.get_object().bucket("avatars").key(key).send().await?;
    Ok(object.content_length().unwrap_or(0) as usize)
}

// The same below a breaker, with the SDK's error written by its path.
#[circuit_breaker(name = "s3")]
#[retry(max = 5)]
async fn get_banner(
    s3: &aws_sdk_s3::Client,
    key: &str,
) -> Result<usize, aws_sdk_s3::error::SdkError<GetObjectError>> {
    let object = s3.get_object().bucket("banners").key(key).send().await?;
    Ok(object.content_length().unwrap_or(0) as usize)
}

// How the client retries is one of two answers.
#[retry(client_retry = "off")]
async fn get_icon(
    s3: &aws_sdk_s3::Client,
    key: &str,
) -> Result<usize, SdkError<GetObjectError, HttpResponse>> {
    let object = s3.get_object().bucket("icons").key(key).send().await?;
    Ok(object.content_length().unwrap_or(0) as usize)
}

fn main() {}
