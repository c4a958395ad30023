use resilience::retry;

struct Request {
    id: u64,
}

#[retry]
async fn get_user(request: Request) -> Result<u64, std::io::Error> {
    Ok(request.id)
}

fn main() {}
