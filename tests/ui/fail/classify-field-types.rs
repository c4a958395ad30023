use resilience::Classify;

#[derive(Debug)]
struct PlainError;

#[derive(Debug, Classify)]
enum ApiError {
    #[classify(status)]
    Status(String),
    #[classify(transient)]
    Throttled(#[classify(retry_after)] u64),
    #[classify(source)]
    Plain(PlainError),
    #[classify(source)]
    Boxed(Box<dyn std::error::Error + Send + Sync>),
}

fn main() {}
