use resilience::Classify;

#[derive(Debug, Classify)]
enum ApiError {
    #[classify(runtime)]
    Resilience(resilience::Error),
    #[classify(runtime)]
    Again(resilience::Error),
    #[classify(permanent)]
    Other,
}

#[derive(Debug, Classify)]
enum WithContext {
    Runtime {
        #[classify(runtime)]
        error: resilience::Error,
        context: String,
    },
}

fn main() {}
