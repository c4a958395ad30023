use resilience::circuit_breaker;

#[derive(Debug)]
enum ClientError {
    Status(u16),
    Resilience(resilience::Error),
}

impl From<resilience::Error> for ClientError {
    fn from(err: resilience::Error) -> Self {
        ClientError::Resilience(err)
    }
}

impl resilience::Classify for ClientError {
    fn classify(&self) -> resilience::Verdict {
        match self {
            ClientError::Status(code) => resilience::retry::HttpStatus(*code).classify(),
            ClientError::Resilience(err) => err.classify(),
        }
    }
}

// The fallback is handed the call's arguments and then the error the call
// ended with; this one does not take the error.
#[circuit_breaker(name = "user", fallback = cached_user)]
async fn get_user(id: u64) -> Result<String, ClientError> {
    std::future::ready(Err(ClientError::Status(503))).await
}

async fn cached_user(id: u64) -> Result<String, ClientError> {
    Ok(format!("cached {id}"))
}

fn main() {}
