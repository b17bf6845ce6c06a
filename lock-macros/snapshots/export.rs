// #[distributed_lock(key = "export:{tenant}" , permits = self . limits . exports , take = 2 , wait = self . config . lock_wait , client = self . locks)]
// async fn export (& self , tenant : u32) -> Result < () , AppError > { self . exporter . run (tenant) . await }

async fn export(&self, tenant: u32) -> Result<(), AppError> {
    let __lock_wait = ::distlock::__private::duration(self.config.lock_wait);
    let __lock_permits = ::distlock::__private::count(self.limits.exports);
    let __lock_acquired = ::distlock::__private::acquire(
            ::core::option::Option::Some(
                ::distlock::__private::lock_client(&(self.locks)),
            ),
            ::std::format!("export:{}", tenant),
            ::distlock::__private::Kind::Permits {
                total: __lock_permits,
                take: 2u32,
            },
            ::distlock::LockOptions::new().wait(::distlock::Wait::from(__lock_wait)),
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
        let __lock_return: Result<(), AppError> = { self.exporter.run(tenant).await };
        #[allow(unreachable_code)] __lock_return
    };
    let __lock_output = ::distlock::LockGuard::scope(&__lock_guard, __lock_body).await;
    ::distlock::__private::release(
            ::distlock::LockGuard::release(__lock_guard),
            "export",
        )
        .await;
    __lock_output
}
