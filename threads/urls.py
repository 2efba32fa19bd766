app_name = "threads"

urlpatterns = []
