"""Private synthetic data: generators that touch the data only through mechanisms. No Beam."""
