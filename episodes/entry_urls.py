app_name = "episodic_entries"

urlpatterns = []
