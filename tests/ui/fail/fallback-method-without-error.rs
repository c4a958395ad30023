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

struct Users;

// A method's fallback takes `self` first, then the method's arguments,
// then the error; this one stops before the error.
impl Users {
    #[circuit_breaker(name = "user", fallback = Self::cached_user)]
    async fn get_user(&self, id: u64) -> Result<String, ClientError> {
        std::future::ready(Err(ClientError::Status(503))).await
    }

    async fn cached_user(&self, id: u64) -> Result<String, ClientError> {
        Ok(format!("cached {id}"))
    }
}

fn main() {}
