use resilience::hedge;

struct Client {
    sent: u32,
}

impl Client {
    // Two attempts at once cannot both hold `&mut self`.
    #[hedge(delay = "50ms")]
    async fn get_user(&mut self, id: u64) -> Result<u64, resilience::Error> {
        self.sent += 1;
        std::future::ready(Ok(id)).await
    }
}

fn main() {}
