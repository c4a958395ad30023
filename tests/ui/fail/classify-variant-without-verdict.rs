use resilience::Classify;

#[derive(Debug, Classify)]
enum ApiError {
    #[classify(permanent)]
    NotFound,
    Timeout,
    #[classify(runtime)]
    Resilience(resilience::Error),
}

fn main() {}
