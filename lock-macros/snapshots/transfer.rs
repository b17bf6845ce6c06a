// #[distributed_lock(keys = ["account:{from.id}" , "account:<to>"] , lease = "5s" , abort_on_lost , client = self . locks)]
// pub async fn transfer (& self , from : & Account , to : u64) -> anyhow :: Result < () > { self . ledger . move_funds (from . id , to) . await }

pub async fn transfer(&self, from: &Account, to: u64) -> anyhow::Result<()> {
    let __lock_acquired = ::distlock::__private::acquire_all(
            ::core::option::Option::Some(
                ::distlock::__private::lock_client(&(self.locks)),
            ),
            ::std::vec![
                ::std::format!("account:{}", from.id), ::std::format!("account:{}", to)
            ],
            ::distlock::LockOptions::new().lease(::core::time::Duration::new(5u64, 0u32)),
        )
        .await;
    let __lock_guard = match __lock_acquired {
        ::core::result::Result::Ok(__lock_guard) => __lock_guard,
        ::core::result::Result::Err(__lock_error) => {
            #[allow(clippy::useless_conversion)]
            let __lock_error = ::core::result::Result::Err(
                ::core::convert::From::from(__lock_error),
            );
            return __lock_error;
        }
    };
    let __lock_body = async move {
        let __lock_return: anyhow::Result<()> = {
            self.ledger.move_funds(from.id, to).await
        };
        #[allow(unreachable_code)] __lock_return
    };
    let __lock_output = match ::distlock::MultiLockGuard::scope_or_lost(
            &__lock_guard,
            __lock_body,
        )
        .await
    {
        ::core::result::Result::Ok(__lock_output) => __lock_output,
        ::core::result::Result::Err(__lock_error) => {
            #[allow(clippy::useless_conversion)]
            let __lock_error = ::core::result::Result::Err(
                ::core::convert::From::from(__lock_error),
            );
            return __lock_error;
        }
    };
    ::distlock::__private::release(
            ::distlock::MultiLockGuard::release(__lock_guard),
            "transfer",
        )
        .await;
    __lock_output
}
