use resilience::retry;

#[retry]
fn get_user(id: u64) -> impl std::future::Future<Output = Result<u64, std::io::Error>> {
    async move { Ok(id) }
}

fn main() {}
